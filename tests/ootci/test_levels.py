import pytest

from ootci import levels
from ootci.levels import PrDisplay


@pytest.mark.parametrize(
    ("level", "forward", "hud", "pr", "block"),
    [
        ("L1", True, False, PrDisplay.NEVER, False),
        ("L2", True, True, PrDisplay.NEVER, False),
        ("L3", True, True, PrDisplay.LABEL_ONLY, False),
        ("L4", True, True, PrDisplay.ALWAYS, True),
    ],
)
def test_the_policy_table_matches_the_rfc(level, forward, hud, pr, block):
    policy = levels.policy(level)
    assert (policy.forward_event, policy.display_on_hud, policy.display_on_pr, policy.block_pr) == (
        forward,
        hud,
        pr,
        block,
    )


def test_promote_and_demote_stop_at_the_ends():
    assert [levels.promoted(lv) for lv in levels.ORDER] == ["L2", "L3", "L4", None]
    assert [levels.demoted(lv) for lv in levels.ORDER] == [None, "L1", "L2", "L3"]


def test_l3_wants_a_check_run_only_with_its_label():
    assert levels.wants_check_run("L3", "npu", ["ciflow/oot/npu"])
    assert not levels.wants_check_run("L3", "npu", ["ciflow/oot/xpu", "ciflow/trunk"])
    assert not levels.wants_check_run("L3", "", ["ciflow/oot/"])


def test_l4_always_and_l1_l2_never_want_check_runs():
    assert levels.wants_check_run("L4", "", [])
    assert not levels.wants_check_run("L2", "npu", ["ciflow/oot/npu"])
    assert not levels.wants_check_run("L1", "npu", ["ciflow/oot/npu"])
