"""The verdict from figures (pure): hand-computed figures at each threshold's edge."""

from datetime import UTC, datetime

import pytest

from ootci import gates
from ootci.gates import WindowFigures

NOW = datetime(2026, 11, 18, 12, tzinfo=UTC)  # a Wednesday


def good(days: int, **changes) -> WindowFigures:
    values = {"successes": 100, "queue_avg": 600.0, "e2e_p50": 3600.0} | changes
    return WindowFigures(days, **values)


@pytest.mark.parametrize(
    ("figures", "failing"),
    [
        ({}, []),
        ({"queue_avg": 1799.999999}, []),
        ({"queue_avg": 1800.0}, ["queue_avg_minutes"]),
        ({"e2e_p50": 10799.999999}, []),
        ({"e2e_p50": 10800.0}, ["e2e_p50_hours"]),
        ({"successes": 99, "infra_failures": 1, "timed_out": 1}, ["timeout_rate"]),  # 1 of 100 = 1 %
        ({"successes": 100, "infra_failures": 1, "timed_out": 1}, []),  # 1 of 101
        ({"overruns": 1}, ["overrun_rate"]),  # 1 of 100
        ({"successes": 101, "overruns": 1}, []),
    ],
)
def test_each_gate_is_strictly_under_its_limit(figures, failing):
    r = gates.judge("L3", good(14), good(7, **figures), failing_since=None, now=NOW)

    assert r.failing == failing
    assert r.verdict == ("at-risk" if failing else "eligible")


def test_a_notice_older_than_two_working_days_is_below_its_level():
    monday = datetime(2026, 11, 16, 9, tzinfo=UTC)
    r = gates.judge("L4", good(14), good(7, queue_avg=4000.0), failing_since=monday, now=NOW)

    assert (r.verdict, str(r.demotion_due)) == ("below", "2026-11-18")
    friday = datetime(2026, 11, 13, tzinfo=UTC)
    assert gates.working_days_after(friday.date(), 2).isoformat() == "2026-11-17"  # over the weekend


def test_no_jobs_is_no_data_and_no_gate_passes():
    r = gates.judge("L2", WindowFigures(14), WindowFigures(7), failing_since=None, now=NOW)

    assert r.verdict == "no-data"
    assert all(g.passed is None for g in r.promotion_gates)


def test_success_and_failure_rates_gate_nothing():
    r = gates.judge("L2", good(14, successes=1, test_failures=99), good(7), failing_since=None, now=NOW)

    assert (r.verdict, r.promotion.success_rate, r.promotion.failed_tests_rate) == ("eligible", 1.0, 99.0)
