"""The log classifier: which line of a job log explains its failure, by rules (``ootci.models.FailureRule``).

Matching is PyTorch's log classifier's, but ANSI codes and the Actions timestamp are stripped, each rule is matched
against one line at a time, and the matching rule of highest priority wins (ties: the later match, then the name); a
generic rule keeps its **last** match, a rule of a real class its **first** (``FIRST_ERROR_WINS``). Warnings are never
the cause. Rules run on RE2 (``google-re2``), linear in any rule and line; a log still stops at its time budget.

Where to look. A job fails in one step; the set-up before it and the post-job steps after it never explain it. The
matches are ranked by where they are: the failed step (the job API's, ``StepWindow``, else the step of the first
``##[error]`` line), then the steps before it, then those after it; a real class beats a generic one (``unknown``:
``Process completed with exit code 1``), so a failed step with only a generic line is explained by a real match
before it. A step header's echoed script (``_scripts``) is not output.

Reading: blocks of about a megabyte; a line kept on its first LINE_CAP bytes. The words any match of a rule must
contain (``relay.reports.literals``) are found in a block by one Aho-Corasick pass, and only the lines holding one are
matched, by the rules needing it (a rule without such a word is searched in every block). Rules are compiled once per
set (``_compiled``): every log of a backend is read with the same ones.
"""

import bisect
import functools
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, BinaryIO

import ahocorasick_rs

from ootci.failures.regex import Unusable, compiled
from relay.reports.literals import required_literals

CHUNK = 1024 * 1024
LINE_CAP = 4096  # bytes of one line kept for matching and display
CONTEXT_LINES = 12
DENSE = 200  # a rule whose word is on more lines of a block than this is searched through the block instead
BUDGET_SECONDS = 60.0  # one log's classification stops here, whatever its size, and says where it stopped
# Stripped before matching: the Actions timestamp (``2026-01-02T03:04:05.1234567Z ``) and ANSI escapes (SGR colours,
# cursor moves, OSC titles), carriage returns (progress bars) and NULs.
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z ?")
STAMPS = re.compile(rb"\n\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z ?")  # after a newline: found by memchr
ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
STEP_HEADER = "##[group]Run "
ENDGROUP = "##[endgroup]"
SCRIPT_COLOUR, RUNNER_KEYS = b"\x1b[36;1m", ("shell: ", "env:", "with:")
SCRIPT_CAP = 300  # lines of a "##[group]Run" header (the step's echoed script) at most
POST_STEP = "Post job cleanup."  # the first line of each post-job step
ERROR = "##[error]"
STAMP = re.compile(rb"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6})\d*)?Z")
GENERIC = "unknown"  # the class of rules that name no cause ("Process completed with exit code 1")
# A rule of a real class keeps its first match in a place: the first error explains the ones after it (the first
# compiler error, the first failed test, the first write that found the disk full). A generic rule keeps its last.
FIRST_ERROR_WINS = ("build", "test", "lint", "infra")
WARNINGS = ("##[warning]", "WARNING:", "warning:")
XTRACE = ("+ ", "++ ", "+++ ")  # a shell's ``set -x`` echo of the command it is about to run, not its output


@dataclass(frozen=True)
class StepWindow:
    """The failed step as the job API reports it: its number, and its start and end (a line is in the step when its
    timestamp is; the job API gives whole seconds, so the end is taken to its last microsecond)."""

    number: int
    started_at: datetime
    completed_at: datetime

    def place(self, at: datetime) -> int:
        """0 before the step, 1 in it, 2 after it."""
        if at < self.started_at:
            return 0
        return 1 if at.replace(microsecond=0) <= self.completed_at else 2


@dataclass(frozen=True)
class Rule:
    id: int | None
    name: str
    regex: str
    failure_class: str
    priority: int


@dataclass(frozen=True)
class Match:
    rule: Rule
    line_number: int  # 1-based, in the whole log
    line: str
    groups: list[str]
    context: list[str]  # up to CONTEXT_LINES lines before it
    step_number: int  # the step it is in, counting "Set up job" as 1 and a step per "##[group]Run" header
    step_line: int  # its line within that step, the header being line 1


@dataclass
class Classification:
    match: Match | None = None
    lines: int = 0
    bytes: int = 0
    capped_lines: int = 0  # lines longer than LINE_CAP, matched on their beginning
    matches: dict[str, int] = field(default_factory=dict)  # rule name → the line it kept (every rule that matched)
    scope: str = ""  # where the chosen line was looked for first
    stopped: str = ""  # why the log was not read to its end ("" when it was)
    unusable: list[str] = field(default_factory=list)  # rules that could not run, and why


class _Compiled:
    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules: list[tuple[Rule, Any]] = []
        self.unusable: list[str] = []  # rules saved before RE2 was the engine that it cannot run: skipped, named
        for rule in rules:
            try:
                self.rules.append((rule, compiled(rule.regex)))
            except Unusable as e:
                self.unusable.append(f"{rule.name}: {e}")
        words: dict[bytes, list[int]] = defaultdict(list)
        self.searched: list[tuple[int, Any]] = []  # rules without a required word
        for index, (rule, _) in enumerate(self.rules):
            literals = required_literals(rule.regex)
            if literals is None:
                self.searched.append((index, compiled(rule.regex, multiline=True)))
            for word in literals or ():
                words[word].append(index)
        self.words = list(words.values())  # automaton pattern index → the rules needing that word
        self._multiline: dict[int, Any] = {}
        dfa = ahocorasick_rs.Implementation.DFA
        self.automaton = ahocorasick_rs.BytesAhoCorasick(list(words), implementation=dfa) if words else None

    def candidates(self, block: bytes) -> dict[int, set[int]]:
        """Line index → the rules to match on it. A rule whose word is on a few lines is matched on those lines; one
        whose word is on many (``.py:`` in a test log) or that has no word is searched through the block by RE2, in
        one linear pass, and only the lines it finds are matched (line matching costs microseconds a call)."""
        found: dict[int, set[int]] = defaultdict(set)
        by_rule: dict[int, set[int]] = defaultdict(set)
        dense: set[int] = set()
        if self.automaton is not None:
            by_word: dict[int, list[int]] = defaultdict(list)
            for pattern, start, _ in self.automaton.find_matches_as_indexes(block.lower(), overlapping=True):
                by_word[pattern].append(start)
            for pattern, starts in by_word.items():
                if len(starts) > DENSE:
                    dense.update(self.words[pattern])
            sparse = sorted((start, p) for p, starts in by_word.items() for start in starts if len(starts) <= DENSE)
            scanned, line = 0, 0
            for start, pattern in sparse:
                line += block.count(b"\n", scanned, start)
                scanned = start
                for index in self.words[pattern]:
                    if index not in dense:
                        by_rule[index].add(line)
        text = None
        for index, pattern in self.searched + [(index, self.multiline(index)) for index in sorted(dense)]:
            if text is None:  # the block as the rules see it: timestamps off, one character per byte of a newline
                text = STAMPS.sub(b"\n", b"\n" + block)[1:].decode("utf-8", errors="replace")
            by_rule[index] = set(_searched_lines(text, pattern))
        for index, lines in by_rule.items():
            for line in lines:
                found[line].add(index)
        return found

    def multiline(self, index: int) -> Any:
        if index not in self._multiline:
            self._multiline[index] = compiled(self.rules[index][0].regex, multiline=True)
        return self._multiline[index]


def _searched_lines(text: str, pattern: Any) -> Iterator[int]:
    pos, scanned, line = 0, 0, 0
    while (hit := pattern.search(text, pos)) is not None:
        line += text.count("\n", scanned, hit.start())
        scanned = hit.start()
        yield line
        end = text.find("\n", hit.start())
        if end < 0:
            return
        pos = end + 1  # the next line: a match must not hide the lines after it


@functools.lru_cache(maxsize=16)
def _compiled(rules: tuple[Rule, ...]) -> _Compiled:
    return _Compiled(rules)


# --- the classifier --------------------------------------------------------------------------------------------------


def log_classify(
    stream: BinaryIO, rules: Iterable[Rule], *, window: StepWindow | None = None, budget: float = BUDGET_SECONDS
) -> Classification:
    """Classify the log read from ``stream`` (bytes; invalid UTF-8 is replaced, never an error). ``window``: the failed
    step as the job API reports it; without it, the step of the first ``##[error]`` line is taken for the failed one."""
    rules_ = _compiled(tuple(rules))
    result = Classification(unusable=list(rules_.unusable))
    deadline = time.monotonic() + budget
    last: dict[tuple[int, int], Match] = {}  # (rule index, place) → the rule's last match there
    tail: list[str] = []  # the last CONTEXT_LINES lines of the previous block
    step, step_start = 1, 1  # the step the block starts in (counting "Set up job" as 1), and that step's first line
    first_error_step = 0  # the step of the first ##[error] line (0: none yet)
    window_start = 0  # with a window: the line number of its first line (0: not reached yet)
    for raw, capped in _blocks(stream):
        if time.monotonic() > deadline:
            result.stopped = f"Stopped at line {result.lines + 1}: the {budget:.0f} s budget of one log was spent."
            break
        result.bytes += len(raw)
        result.capped_lines += capped
        block = ANSI.sub(b"", raw) if b"\x1b" in raw else raw
        block = block.replace(b"\r", b"").replace(b"\x00", b"")
        lines = block.split(b"\n")[:-1]  # with their timestamps, which place them in the job API's step
        first = result.lines + 1
        headers = _step_headers(block, lines, first)
        if not first_error_step and (error := _first_error(block, lines, first)):
            first_error_step = _step_of(headers, error, step, step_start)[0]
        if window and not window_start:
            window_start = _window_start(lines, first, window)
        scripts = _scripts(block, lines, first)
        for index, rule_ids in sorted(rules_.candidates(block).items()):
            line = _clean(lines[index])
            if line.startswith(WARNINGS + XTRACE) or _within(scripts, first + index):
                continue  # a warning, an echoed command or script: printed on the way to a failure, never its cause
            context = None
            for rule_id in sorted(rule_ids):
                rule, pattern = rules_.rules[rule_id]
                hit = pattern.search(line)
                if hit:
                    if context is None:
                        context = tail + [_clean(text) for text in lines[max(0, index - CONTEXT_LINES) : index]]
                        context = context[-CONTEXT_LINES:]
                    number = first + index
                    n, step_first = _step_of(headers, number, step, step_start)
                    place = n
                    if window:
                        place = window.place(_stamp(lines, index) or window.started_at)
                        if place == 1 and window_start:
                            n, step_first = window.number, window_start
                    if (rule_id, place) in last and rule.failure_class in FIRST_ERROR_WINS:
                        continue
                    groups = [g or "" for g in hit.groups()]
                    last[rule_id, place] = Match(rule, number, line, groups, context, n, number - step_first + 1)
        result.lines += len(lines)
        step, step_start = _step_of(headers, result.lines + 1, step, step_start)
        tail = (tail + [_clean(text) for text in lines[-CONTEXT_LINES:]])[-CONTEXT_LINES:]
    for m in sorted(last.values(), key=lambda m: m.line_number):
        result.matches[m.rule.name] = m.line_number
    places = {place for _, place in last}
    if window:
        result.scope = f"the failed step {window.number} (job API)"
        tiers = [{1}, {0}, {2}]
    elif first_error_step:
        result.scope = f"step {first_error_step}, which holds the first ##[error] line"
        tiers = [{first_error_step}, {p for p in places if p < first_error_step}, places]
    else:
        result.scope = "the whole log (no failed step known)"
        tiers = [places]
    result.match = _chosen(last, tiers)
    return result


def _chosen(last: dict[tuple[int, int], Match], tiers: list[set[int]]) -> Match | None:
    """The first place with a match decides, a real class over a generic one; but a failed step with only a generic
    line (a results check) is explained by a real match before it, never after it (post-job noise)."""
    found = [[m for (_, place), m in last.items() if place in tier] for tier in tiers]
    specific = [[m for m in tier if m.rule.failure_class != GENERIC] for tier in found]
    for candidates in [*specific[:2], *found[:2], *found[2:]]:
        if candidates:
            real = [m for m in candidates if m.rule.failure_class != GENERIC]
            return max(real or candidates, key=lambda m: (m.rule.priority, m.line_number, m.rule.name))
    return None


def _clean(line: bytes) -> str:
    return TIMESTAMP.sub("", line.decode("utf-8", errors="replace"), count=1)


def _step_headers(block: bytes, lines: list[bytes], first: int) -> list[int]:
    """The line numbers of the block's step headers (``##[group]Run …`` or ``Post job cleanup.`` after the
    timestamp), in order."""
    found = _marked(block, lines, first, STEP_HEADER) + _marked(block, lines, first, POST_STEP)
    return sorted(found)


def _scripts(block: bytes, lines: list[bytes], first: int) -> list[tuple[int, int]]:
    """The spans (first line, last line) of the block's ``##[group]Run …`` headers closed by their ``##[endgroup]``:
    the runner echoes the step's script, inputs and shell there, and a script's ``echo "ERROR: …"`` is no error yet. A
    header not closed within SCRIPT_CAP lines, before the next one and in the same block, is left alone."""
    marks = sorted(
        [(n, 0) for n in _marked(block, lines, first, STEP_HEADER)]
        + [(n, 1) for n in _marked(block, lines, first, ENDGROUP)]
    )
    spans, opened = [], 0
    for number, is_end in marks:
        if is_end and opened and number - opened <= SCRIPT_CAP and _echoes(lines[opened - first : number - first]):
            spans.append((opened, number))
        opened = 0 if is_end else number
    return spans


def _echoes(header: list[bytes]) -> bool:
    """A header the runner wrote (its script in cyan, its ``shell:``, ``env:`` or ``with:``), not a tool's output."""
    return any(SCRIPT_COLOUR in line or _clean(line).strip().startswith(RUNNER_KEYS) for line in header)


def _within(spans: list[tuple[int, int]], number: int) -> bool:
    return any(start <= number <= end for start, end in spans)


def _first_error(block: bytes, lines: list[bytes], first: int) -> int:
    """The line number of the block's first ``##[error]`` line, 0 when it has none."""
    found = _marked(block, lines, first, ERROR, stop_at_first=True)
    return found[0] if found else 0


def _marked(block: bytes, lines: list[bytes], first: int, marker: str, *, stop_at_first: bool = False) -> list[int]:
    """The line numbers of the block's lines that start with ``marker`` after the timestamp."""
    found, pos, scanned, line = [], 0, 0, 0
    encoded = marker.encode()
    while (pos := block.find(encoded, pos)) >= 0:
        line += block.count(b"\n", scanned, pos)
        scanned = pos
        if _clean(lines[line]).startswith(marker) and (not found or found[-1] != first + line):
            found.append(first + line)
            if stop_at_first:
                break
        pos += len(encoded)
    return found


def _stamp(lines: list[bytes], index: int) -> datetime | None:
    """The time of line ``index``: its own timestamp, else that of the nearest line before it in the block."""
    for i in range(index, max(-1, index - 50), -1):
        if found := STAMP.match(lines[i]):
            year, month, day, hour, minute, second, fraction = found.groups()
            micro = int((fraction or b"0").ljust(6, b"0"))
            return datetime(*map(int, (year, month, day, hour, minute, second)), micro, tzinfo=UTC)
    return None


def _window_start(lines: list[bytes], first: int, window: StepWindow) -> int:
    """The line number of the window's first line, when this block holds it (0 when not)."""
    if not lines or (end := _stamp(lines, len(lines) - 1)) is None or end < window.started_at:
        return 0
    index = bisect.bisect_left(
        range(len(lines)), True, key=lambda i: (_stamp(lines, i) or window.started_at) >= window.started_at
    )
    return first + index


def _step_of(headers: list[int], line: int, step: int, step_start: int) -> tuple[int, int]:
    """The step (number, first line) of line number ``line``, given the block's headers and the step it began in."""
    k = bisect.bisect_right(headers, line)
    return (step + k, headers[k - 1]) if k else (step, step_start)


def _blocks(stream: BinaryIO) -> Iterator[tuple[bytes, int]]:
    """The log in blocks of whole lines (each ending with a newline), every line cut to LINE_CAP bytes; with the
    number of lines cut in each block. Memory stays at about a CHUNK whatever the log's lines are like."""
    rest, skipping = b"", False
    while chunk := stream.read(CHUNK):
        if skipping:  # the remainder of a line already cut
            newline = chunk.find(b"\n")
            if newline < 0:
                continue
            chunk, skipping = chunk[newline + 1 :], False
        data = rest + chunk
        cut = data.rfind(b"\n")
        block, rest = (data[: cut + 1], data[cut + 1 :]) if cut >= 0 else (b"", data)
        if block:
            yield _capped(block)
        if len(rest) > LINE_CAP:
            yield rest[:LINE_CAP] + b"\n", 1
            rest, skipping = b"", True
    if rest:
        yield _capped(rest + b"\n")


def _capped(block: bytes) -> tuple[bytes, int]:
    if len(block) <= LINE_CAP:
        return block, 0
    lines = block.split(b"\n")
    if max(map(len, lines)) <= LINE_CAP:  # the common case, without a Python loop over the lines
        return block, 0
    long = sum(1 for line in lines if len(line) > LINE_CAP)
    return b"\n".join(line[:LINE_CAP] for line in lines), long
