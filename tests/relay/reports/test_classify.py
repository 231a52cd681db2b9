"""The log classifier on the labelled corpus of job logs (tests/relay/reports/corpus.py) and on hostile logs."""

import io
import time
from datetime import UTC, datetime

import pytest

from relay.reports.classify import LINE_CAP, Rule, StepWindow, log_classify
from relay.reports.literals import required_literals
from relay.reports.logs import rules_for
from relay.reports.signatures import signature
from tests.relay.reports.corpus import HELD_OUT, LOGS, TUNED, labelled, verdicts


def test_the_corpus_holds_at_least_100_logs_with_a_part_held_out():
    assert len(TUNED) + len(HELD_OUT) >= 100
    assert len(HELD_OUT) >= 30


@pytest.mark.usefixtures("failure_rules")
def test_tuned_logs_get_the_line_a_person_points_at_and_no_test_failure_is_infra():
    # Not every one: the people who labelled them point at different lines of a failed pytest test (the per-test
    # header under FAILURES, the FAILED summary line, the exception's line); the rules follow what the blind labellers
    # of the held-out sets chose (7 of 8 logs with both; 5 of 6 over PyTorch's "FAILED CONSISTENTLY"): the FAILED
    # line, which names the test and its error. Every other miss is a rule to write.
    found = verdicts(TUNED, rules_for(backend_id=None))
    missed = [str(v) for v in found if not v.line_agrees]
    assert sum(v.line_agrees for v in found) >= 0.88 * len(found), "\n".join(missed)
    assert [str(v) for v in found if v.test_called_infra] == []


@pytest.mark.usefixtures("failure_rules")
def test_no_held_out_test_failure_is_called_infra():
    # The held-out agreement (goal >= 90 %) is the benchmark's figure (tests/bench/bench_failures.py, README): it is
    # measured, not tuned for. That no test failure is called infra holds on every log, held out or not.
    found = verdicts(HELD_OUT, rules_for(backend_id=None))
    assert [str(v) for v in found if v.test_called_infra] == []
    assert all(v.found.match is not None for v in found)  # every log gets a line


@pytest.mark.usefixtures("failure_rules")
def test_the_long_log_is_100000_lines_with_the_cause_near_the_top():
    log = labelled(LOGS / "tuned" / "long_noise_after_cause.log")
    found = log_classify(io.BytesIO(log.body), rules_for(backend_id=None))
    assert found.lines > 100_000
    assert found.match.line_number < 20
    assert "No space left on device" in found.match.line


RULES = [
    Rule(1, "generic", r"##\[error\](.*)", "unknown", 1),
    Rule(2, "pytest", r"^FAILED (\S+)", "test", 50),
    Rule(3, "disk", r"(?i)no space left", "infra", 90),
]


def classify(text: str | bytes, rules=RULES):
    data = text.encode() if isinstance(text, str) else text
    return log_classify(io.BytesIO(data), rules)


def test_a_rule_keeps_its_first_match_a_generic_rule_its_last_and_the_highest_priority_wins():
    found = classify("FAILED a::one\nFAILED a::two\n##[error]first\n##[error]Process completed\nnoise\n")
    assert found.match.rule.name == "pytest"
    assert (found.match.line_number, found.match.groups) == (1, ["a::one"])  # the first failure explains the rest
    assert found.matches == {"pytest": 1, "generic": 4}


def test_a_warning_is_never_the_cause():
    found = classify("WARNING: Retrying after no space left\n##[warning]no space left soon\nno space left on device\n")
    assert found.match.line_number == 3


def test_ansi_codes_and_the_actions_timestamp_are_stripped_before_matching():
    found = classify("2026-03-01T10:00:00.1234567Z \x1b[31mFAILED\x1b[0m test_x.py::t\n")
    assert found.match.line == "FAILED test_x.py::t"


def test_context_is_the_12_lines_before_the_match_and_the_step_is_counted():
    lines = ["Set up"] + ["##[group]Run make"] + [f"line {n}" for n in range(20)] + ["No space left on device"]
    found = classify("\n".join(lines) + "\n")
    assert found.match.context == [f"line {n}" for n in range(8, 20)]
    assert (found.match.step_number, found.match.step_line) == (2, 22)


def test_a_match_near_a_block_boundary_gets_its_context_from_the_block_before():
    filler = "x" * 99 + "\n"
    body = filler * 10486 + "No space left on device\n"  # the match opens the second 1 MB block
    found = classify(body)
    assert found.match.line_number == 10487
    assert found.match.context == ["x" * 99] * 12


def test_invalid_utf8_is_classified_not_refused():
    found = classify(b"\xff\xfe\xc3(\n\x80FAILED? no\nNo space \xe9 left\nno space left on device \xff\n")
    assert found.match.rule.name == "disk"
    assert found.match.line_number == 4


def test_a_10_mb_single_line_is_cut_and_still_classified():
    body = b"FAILED big::" + b"x" * (10 * 1024 * 1024) + b"\nafter\n"
    found = classify(body)
    assert found.capped_lines == 1
    assert found.lines == 2
    assert found.match.rule.name == "pytest"
    assert len(found.match.line) == LINE_CAP


def test_an_ansi_flood_is_stripped():
    body = ("\x1b[1;31m\x1b[0m" * 50_000 + "\n") * 20 + "\x1b[2K\x1b]0;title\x07no space left\n"
    found = classify(body)
    assert found.match.line == "no space left"
    assert found.lines == 21


def test_a_rule_without_a_required_word_is_still_matched():
    rules = [Rule(1, "digits", r"^\d+$", "unknown", 1)]
    assert required_literals(r"^\d+$") is None
    assert classify("abc\n12345\nxyz\n", rules).match.line_number == 2


def test_required_words_cover_alternatives_and_ignore_optional_parts():
    assert required_literals(r"(?i)(no space left|ENOSPC)") == [b"enospc", b"no space left"]
    assert required_literals(r"^FAILED (\S+)( - (.*))?") == [b"failed "]
    assert required_literals(r"(abc)?xy") is None  # "xy" is too short to filter on


def test_required_words_run_on_through_groups_so_common_words_are_not_the_filter():
    # "test" alone would make most lines of a test log candidates; the words around the groups are rarer.
    unittest = r"^(FAIL|ERROR): (?P<test>test\w*) \((?P<case>[\w.]+)\)"
    assert required_literals(unittest) == [b"error: test", b"fail: test"]
    assert required_literals(r"^(?P<file>[^\s:]+\.py):\d+:\d+: ") == [b".py:"]
    assert required_literals(r"errors?: (xa|yb)") == [b"error: xa", b"error: yb", b"errors: xa", b"errors: yb"]
    assert required_literals(r"(?i)a{2,}bcd") == [b"abcd"]  # a repeat ends in its own word
    assert required_literals(r"(a|b|c|d|e|f|g|h|i){3}") is None  # too many words to keep: no filter, still correct
    rules = [Rule(1, "unittest failure", unittest, "test", 1)]
    log = "test_a passed\nERROR: testing nothing\nFAIL: test_b (suite.Case)\nERROR: test_c (suite.Case)\n"
    assert classify(log, rules).match.line_number == 3  # the first failure; "ERROR: testing" is no unittest line


def test_signatures_mask_what_varies():
    one = signature("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB at 0x7f12 in /a/b/c.py:12 after 3.5s")
    two = signature("RuntimeError: NPU out of memory. Tried to allocate 8.00 GiB at 0x9abc in /x/y/c.py:99 after 12s")
    assert one == two
    assert "NPU out of memory" in one


def test_post_job_noise_never_decides_a_failed_step():
    log = (
        "##[group]Run pytest\nFAILED t.py::test_x - assert 1 == 2\n##[error]Process completed with exit code 1.\n"
        "##[group]Run actions/upload-artifact@v4\nno space left on device\n##[error]Upload failed\nPost job cleanup.\n"
    )
    found = classify(log)
    assert (found.match.rule.name, found.match.line_number) == ("pytest", 2)
    assert found.scope == "step 2, which holds the first ##[error] line"


def test_a_results_check_that_prints_nothing_is_explained_by_the_test_step_before_it_not_the_noise_after():
    log = (
        "##[group]Run pytest || true\nFAILED t.py::test_x - assert 1 == 2\n"
        "##[group]Run python check_results.py\n##[error]Process completed with exit code 1.\n"
        "##[group]Run actions/upload-artifact@v4\nno space left on device\nPost job cleanup.\n"
    )
    found = classify(log)
    assert (found.match.rule.name, found.match.line_number) == ("pytest", 2)


def test_a_generic_line_wins_only_where_nothing_else_matched():
    assert classify("##[group]Run make\ncompiling\n##[error]Process completed with exit code 2.\n").match.rule.name == (
        "generic"
    )
    found = classify("##[group]Run pytest\nFAILED t.py::a\n##[error]Process completed with exit code 1.\n")
    assert found.match.rule.name == "pytest"


def test_the_job_apis_step_times_place_the_lines_and_number_the_link():
    log = (
        "2026-03-01T10:00:00.0000000Z Set up job\n"
        "2026-03-01T10:00:01.5000000Z ##[group]Run pytest\n"
        "2026-03-01T10:00:02.0000000Z FAILED t.py::a - boom\n"
        "2026-03-01T10:00:02.9999999Z ##[error]Process completed with exit code 1.\n"
        "2026-03-01T10:00:04.0000000Z ##[group]Run upload\n"
        "2026-03-01T10:00:05.0000000Z FAILED t.py::b (printed by the upload step)\n"
    )
    start, end = datetime(2026, 3, 1, 10, 0, 1, tzinfo=UTC), datetime(2026, 3, 1, 10, 0, 2, tzinfo=UTC)
    found = log_classify(io.BytesIO(log.encode()), RULES, window=StepWindow(7, start, end))
    assert (found.match.line_number, found.match.step_number, found.match.step_line) == (3, 7, 2)
    assert found.scope == "the failed step 7 (job API)"


def test_a_hostile_rule_on_a_hostile_line_is_linear_and_the_budget_ends_a_log_with_a_reason():
    hostile = [Rule(1, "nested repeats", r"ERROR: (a+)+$", "infra", 1)]
    line = "ERROR: " + "a" * 4000 + "!\n"  # a backtracking engine takes minutes on one such line
    began = time.monotonic()
    found = classify(line * 200, hostile)
    assert time.monotonic() - began < 2 and found.match is None and found.lines == 200
    stopped = log_classify(io.BytesIO((line * 200).encode()), hostile, budget=0)
    assert stopped.stopped == "Stopped at line 1: the 0 s budget of one log was spent."


def test_a_rule_re2_cannot_run_is_skipped_and_named():
    found = classify("FAILED a::b\n", [*RULES, Rule(9, "lookahead", r"FAILED (?=a)", "test", 99)])
    assert found.match.rule.name == "pytest"
    assert found.unusable == [
        "lookahead: Rules run on RE2, a linear-time engine, which does not support a lookahead "
        "or lookbehind (?=…) / (?<=…): rewrite the regex without it."
    ]


def test_a_shells_echo_of_a_command_is_not_its_output():
    rules = [Rule(1, "driver", r"NVIDIA-SMI has failed", "infra", 950)]
    log = "+ VERSION='NVIDIA-SMI has failed because it couldn'\\''t communicate'\nNVIDIA-SMI has failed because x\n"
    assert classify(log, rules).match.line_number == 2


def test_the_script_a_step_header_echoes_is_not_its_output():
    # The runner prints a step's script between "##[group]Run" and "##[endgroup]": an `echo "ERROR: …"` there is the
    # script, not yet an error; the same text printed by the step is.
    rules = [Rule(1, "dirty", r"ERROR: generated files are out of date", "lint", 600)]
    log = (
        "2026-07-22T11:20:22.9Z ##[group]Run bash ci/gen_ops.sh\n"
        "2026-07-22T11:20:23.0Z \x1b[36;1mgit diff --exit-code || "
        '{ echo "ERROR: generated files are out of date"; }\x1b[0m\n'
        "2026-07-22T11:20:23.3Z shell: /usr/bin/bash -e {0}\n"
        "2026-07-22T11:20:23.5Z ##[endgroup]\n"
        "2026-07-22T11:20:25.1Z diff --git a/op.h b/op.h\n"
        "2026-07-22T11:20:25.2Z ERROR: generated files are out of date\n"
        "2026-07-22T11:20:25.3Z ##[error]Process completed with exit code 1.\n"
    )
    found = classify(log, rules)
    assert found.match.line_number == 6
    unclosed = "##[group]Run make\nERROR: generated files are out of date\n"  # no "##[endgroup]": output, not script
    assert classify(unclosed, rules).match.line_number == 2
    # A group the runner did not write (no cyan script, no shell:, env: or with: lines) is a tool's output, read.
    tools_own = "##[group]Run make\n+ make gen\nERROR: generated files are out of date\n##[endgroup]\n"
    assert classify(tools_own, rules).match.line_number == 3
