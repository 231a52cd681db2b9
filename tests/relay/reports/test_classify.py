"""The log classifier on the corpus of downstream job logs (tests/relay/reports/failure_logs) and on hostile logs."""

import io
import re
from pathlib import Path

import pytest

from relay.reports.classify import LINE_CAP, Rule, log_classify, required_literals, signature
from relay.reports.logs import rules_for

LOGS = Path(__file__).parent / "failure_logs"
EXPECT = re.compile(r"^# expect rule='(?P<rule>[^']+)' class=(?P<cls>\w+)")
NOISE = "2026-03-02T10:{m:02d}:{s:02d}.0000000Z [{n}/100000] Building CXX object torch_npu/csrc/ops/Op{n}.cpp.o\n"


def corpus_log(path: Path) -> tuple[bytes, str, str]:
    """A corpus log without its header lines, and the rule and class its first line expects."""
    text = path.read_text()
    expected = EXPECT.match(text)
    assert expected, f"{path.name} does not say what it expects"
    header = [line for line in text.splitlines(keepends=True) if line.startswith("# ")]
    body = text[sum(map(len, header)) :]
    noise = re.search(r"^# noise: (\d+)", text, re.MULTILINE)
    if noise:
        body += "".join(NOISE.format(m=n // 60 % 60, s=n % 60, n=n) for n in range(int(noise.group(1))))
    return body.encode(), expected["rule"], expected["cls"]


CORPUS = sorted(LOGS.glob("*.log"))


def test_the_corpus_holds_at_least_30_logs():
    assert len(CORPUS) >= 30


@pytest.mark.usefixtures("failure_rules")
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_each_corpus_log_gets_its_expected_rule_and_class(path):
    body, rule, cls = corpus_log(path)
    found = log_classify(io.BytesIO(body), rules_for(backend_id=None))
    assert found.match is not None
    assert (found.match.rule.name, found.match.rule.failure_class) == (rule, cls)


@pytest.mark.usefixtures("failure_rules")
def test_the_long_log_is_100000_lines_with_the_cause_near_the_top():
    body, _, _ = corpus_log(LOGS / "long_noise_after_cause.log")
    found = log_classify(io.BytesIO(body), rules_for(backend_id=None))
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


def test_each_rule_keeps_its_last_match_and_the_highest_priority_wins():
    found = classify("FAILED a::one\nFAILED a::two\n##[error]Process completed\nnoise\n")
    assert found.match.rule.name == "pytest"
    assert (found.match.line_number, found.match.groups) == (2, ["a::two"])
    assert found.matches == {"pytest": 2, "generic": 3}


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
    log = "test_a passed\nFAIL: test_b (suite.Case)\nERROR: testing nothing\nERROR: test_c (suite.Case)\n"
    assert classify(log, rules).match.line_number == 4


def test_signatures_mask_what_varies():
    one = signature("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB at 0x7f12 in /a/b/c.py:12 after 3.5s")
    two = signature("RuntimeError: NPU out of memory. Tried to allocate 8.00 GiB at 0x9abc in /x/y/c.py:99 after 12s")
    assert one == two
    assert "NPU out of memory" in one
