"""The log classifier: which line of a job log explains its failure, by rules (``ootci.models.FailureRule``).

Matching is PyTorch's log classifier's: ANSI codes and the Actions timestamp prefix are stripped, every rule is
matched against one line at a time, each rule keeps its **last** match in the log, and the matching rule of highest
priority wins (ties: the later match, then the name). The log is read as a stream in blocks of about a megabyte,
never whole; a line longer than LINE_CAP bytes is matched and kept on its first LINE_CAP bytes.

Speed: most lines of a log match no rule, and Python's regex engine would take seconds per rule on a 50 MB log. So
each rule's regex is parsed for the words any match must contain (``required_literals``: "no space left" for
``(?i)no space left on device``), one Aho-Corasick automaton finds those words in a block in a single pass, and only
the lines holding one are matched, each by the rules whose word it holds. A rule without such a word (say
``^\\d+$``) is searched in every block: it works, but slowly (the admin says so).
"""

import bisect
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from re import _constants as sre
from re import _parser as sre_parse
from typing import BinaryIO

import ahocorasick_rs

CHUNK = 1024 * 1024
LINE_CAP = 4096  # bytes of one line kept for matching and display
CONTEXT_LINES = 12
MIN_LITERAL = 3  # shorter required words would make nearly every line a candidate: such a rule is searched instead
# Stripped before matching: the Actions timestamp (``2026-01-02T03:04:05.1234567Z ``) and ANSI escapes (SGR colours,
# cursor moves, OSC titles), carriage returns (progress bars) and NULs.
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z ?")
ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
STEP_HEADER = "##[group]Run "


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
    matches: dict[str, int] = field(default_factory=dict)  # rule name → its last line (every rule that matched)


# --- the words a rule needs ------------------------------------------------------------------------------------------


def required_literals(regex: str) -> list[bytes] | None:
    """Lower-case words one of which every match of ``regex`` contains, or None when none can be told."""
    try:
        parsed = sre_parse.parse(regex)
    except (re.error, RecursionError):
        return None
    words = _sequence(list(parsed), bool(parsed.state.flags & re.IGNORECASE)).best
    if not words or min(map(len, words)) < MIN_LITERAL:
        return None
    return sorted(words)


MAX_WORDS = 64  # more alternatives than this in one set: the set is not kept (a prefilter needs few words)


def _cross(left: frozenset | None, right: frozenset | None) -> frozenset | None:
    if left is None or right is None or len(left) * len(right) > MAX_WORDS:
        return None
    return frozenset(a + b for a in left for b in right)


def _best(*options: frozenset | None) -> frozenset | None:
    """The set worth filtering on: its shortest word longest, then the fewest words (rarer lines match)."""
    found = [words for words in options if words]
    return max(found, key=lambda words: (min(map(len, words)), -len(words)), default=None)


@dataclass(frozen=True)
class _Words:
    """What is known of the text a part of a regex matches: ``exact``, every string it can match (None when they are
    not few); one of ``prefixes`` starts every match and one of ``suffixes`` ends it ({b""}: nothing known); one of
    ``required`` is in every match. A literal run split by a group, ``(FAIL|ERROR): `` or ``(\\S+\\.py):``, so
    gives ``fail: ``/``error: `` and ``.py:``: longer, rarer words than any of its parts."""

    exact: frozenset | None
    prefixes: frozenset = frozenset({b""})
    suffixes: frozenset = frozenset({b""})
    required: frozenset | None = None

    @property
    def best(self) -> frozenset | None:
        return _best(self.required, self.exact)

    def then(self, other: "_Words") -> "_Words":
        exact = _cross(self.exact, other.exact)
        if exact is not None:
            return _exactly(exact, self.required, other.required)
        return _Words(
            None,
            _cross(self.exact, other.prefixes) or self.prefixes,
            _cross(self.suffixes, other.exact) or other.suffixes,
            _best(self.required, other.required, self.exact, other.exact, _cross(self.suffixes, other.prefixes)),
        )


def _exactly(words: frozenset, *required: frozenset | None) -> _Words:
    return _Words(words, words, words, _best(words, *required))


EMPTY = _exactly(frozenset({b""}))  # an anchor or a lookaround: it matches no text
UNKNOWN = _Words(None)


def _sequence(items: list, ignore_case: bool) -> _Words:
    found = EMPTY
    for op, av in items:
        found = found.then(_item(op, av, ignore_case))
    return found


def _item(op, av, ignore_case: bool) -> _Words:
    if op is sre.LITERAL:
        if ignore_case and av > 127 and chr(av).lower() != chr(av).upper():
            return UNKNOWN
        return _exactly(frozenset({chr(av).encode().lower()}))
    if op is sre.SUBPATTERN:
        _, add_flags, _, pattern = av
        return _sequence(list(pattern), ignore_case or bool(add_flags & re.IGNORECASE))
    if op is sre.ATOMIC_GROUP:
        return _sequence(list(av), ignore_case)
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
        least, most, pattern = av
        inner = _sequence(list(pattern), ignore_case)
        if least == most == 1:
            return inner
        if least == 0:
            return _exactly(inner.exact | EMPTY.exact) if most == 1 and inner.exact is not None else UNKNOWN
        return _Words(None, inner.prefixes, inner.suffixes, inner.best)
    if op is sre.BRANCH:
        branches = [_sequence(list(branch), ignore_case) for branch in av[1]]
        required = [branch.best for branch in branches]
        exact = [branch.exact for branch in branches]
        if all(words is not None for words in exact) and sum(map(len, exact)) <= MAX_WORDS:
            return _exactly(frozenset().union(*exact))
        return _Words(
            None,
            frozenset().union(*(branch.prefixes for branch in branches)),
            frozenset().union(*(branch.suffixes for branch in branches)),
            frozenset().union(*required) if all(required) else None,
        )
    if op in (sre.AT, sre.ASSERT, sre.ASSERT_NOT):
        return EMPTY
    return UNKNOWN  # a class, any character, a backreference: no word known


class _Compiled:
    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = [(rule, re.compile(rule.regex)) for rule in rules]
        words: dict[bytes, list[int]] = defaultdict(list)
        self.searched: list[tuple[int, re.Pattern]] = []  # rules without a required word
        for index, (rule, _) in enumerate(self.rules):
            literals = required_literals(rule.regex)
            if literals is None:
                self.searched.append((index, re.compile(rule.regex, re.MULTILINE)))
            for word in literals or ():
                words[word].append(index)
        self.words = list(words.values())  # automaton pattern index → the rules needing that word
        self.automaton = (
            ahocorasick_rs.BytesAhoCorasick(list(words), implementation=ahocorasick_rs.Implementation.DFA)
            if words
            else None
        )

    def candidates(self, block: bytes, lines: list[bytes]) -> dict[int, set[int]]:
        """Line index → the rules to match on it: those whose word it holds, and the searched rules' hits."""
        found: dict[int, set[int]] = defaultdict(set)
        if self.automaton is not None:
            hits = sorted(
                (start, pattern)
                for pattern, start, _ in self.automaton.find_matches_as_indexes(block.lower(), overlapping=True)
            )
            scanned, line = 0, 0
            for start, pattern in hits:
                line += block.count(b"\n", scanned, start)
                scanned = start
                found[line].update(self.words[pattern])
        if self.searched:
            text = block.decode("utf-8", errors="replace")  # one character per byte of a newline: same line numbers
            for index, pattern in self.searched:
                for line in _searched_lines(text, pattern):
                    found[line].add(index)
        return found


def _searched_lines(text: str, pattern: re.Pattern) -> Iterator[int]:
    pos, scanned, line = 0, 0, 0
    while (hit := pattern.search(text, pos)) is not None:
        line += text.count("\n", scanned, hit.start())
        scanned = hit.start()
        yield line
        end = text.find("\n", hit.start())
        if end < 0:
            return
        pos = end + 1  # the next line: a match must not hide the lines after it


# --- the classifier --------------------------------------------------------------------------------------------------


def log_classify(stream: BinaryIO, rules: Iterable[Rule]) -> Classification:
    """Classify the log read from ``stream`` (bytes; invalid UTF-8 is replaced, never an error)."""
    compiled = _Compiled(rules)
    result = Classification()
    last: dict[int, Match] = {}  # rule index → its last match so far
    tail: list[str] = []  # the last CONTEXT_LINES lines of the previous block
    step, step_start = 1, 1  # the step the block starts in, and that step's first line
    for raw, capped in _blocks(stream):
        result.bytes += len(raw)
        result.capped_lines += capped
        block = ANSI.sub(b"", raw).replace(b"\r", b"").replace(b"\x00", b"")
        lines = block.split(b"\n")[:-1]
        first = result.lines + 1
        headers = _step_headers(block, lines, first)
        for index, rule_ids in sorted(compiled.candidates(block, lines).items()):
            line = _clean(lines[index])
            context = None
            for rule_id in sorted(rule_ids):
                rule, pattern = compiled.rules[rule_id]
                hit = pattern.search(line)
                if hit:
                    if context is None:
                        context = tail + [_clean(text) for text in lines[max(0, index - CONTEXT_LINES) : index]]
                        context = context[-CONTEXT_LINES:]
                    n, step_first = _step_of(headers, first + index, step, step_start)
                    groups = [g or "" for g in hit.groups()]
                    last[rule_id] = Match(rule, first + index, line, groups, context, n, first + index - step_first + 1)
        result.lines += len(lines)
        step, step_start = _step_of(headers, result.lines + 1, step, step_start)
        tail = (tail + [_clean(text) for text in lines[-CONTEXT_LINES:]])[-CONTEXT_LINES:]
    result.matches = {m.rule.name: m.line_number for m in last.values()}
    if last:
        result.match = max(last.values(), key=lambda m: (m.rule.priority, m.line_number, m.rule.name))
    return result


def _clean(line: bytes) -> str:
    return TIMESTAMP.sub("", line.decode("utf-8", errors="replace"), count=1)


def _step_headers(block: bytes, lines: list[bytes], first: int) -> list[int]:
    """The line numbers of the block's step headers (``##[group]Run …`` after the timestamp), in order."""
    found, pos, scanned, line = [], 0, 0, 0
    marker = STEP_HEADER.encode()
    while (pos := block.find(marker, pos)) >= 0:
        line += block.count(b"\n", scanned, pos)
        scanned = pos
        if _clean(lines[line]).startswith(STEP_HEADER):
            found.append(first + line)
        pos += len(marker)
    return found


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
    long = sum(1 for line in lines if len(line) > LINE_CAP)
    if not long:
        return block, 0
    return b"\n".join(line[:LINE_CAP] for line in lines), long


# --- signatures ------------------------------------------------------------------------------------------------------

# What varies between occurrences of the same failure, masked so that they group: hex ids and addresses, paths,
# durations and sizes, numbers. Order matters: the specific before the general.
MASKS = [
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"\b[0-9a-f]{7,64}\b"), "<hex>"),
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<uuid>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:[\w.+-]*/)+([\w.+-]+)"), r"…/\1"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|sec|seconds|min|minutes|h|KiB|MiB|GiB|KB|MB|GB|B)\b"), "<n><unit>"),
    (re.compile(r"\d+"), "<n>"),
]


def signature(line: str) -> str:
    """The matched line with what varies between occurrences masked; at most 500 characters."""
    text = line.strip()[:1000]
    for pattern, replacement in MASKS:
        text = pattern.sub(replacement, text)
    return re.sub(r"\s+", " ", text)[:500]
