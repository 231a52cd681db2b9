"""The words a rule needs: parsed from its regex, they let one Aho-Corasick pass over a block pick the lines worth
matching (``relay.reports.classify``). ``required_literals(r"(?i)no space left on device")`` is ``[b"no space left
on device"]``; a regex without such a word (say ``^\\d+$``) gives None and is searched in every block instead."""

import functools
import re
from dataclasses import dataclass
from re import _constants as sre
from re import _parser as sre_parse

MIN_LITERAL = 3  # shorter required words would make nearly every line a candidate: such a rule is searched instead


def required_literals(regex: str) -> list[bytes] | None:
    """Lower-case words one of which every match of ``regex`` contains, or None when none can be told."""
    words = _required(regex)
    return None if words is None else list(words)


@functools.lru_cache(maxsize=4096)
def _required(regex: str) -> tuple[bytes, ...] | None:
    """Parsing a rule costs about a millisecond and every log asks for every rule's words: kept per regex."""
    try:
        parsed = sre_parse.parse(regex)
    except (re.error, RecursionError):
        return None
    words = _sequence(list(parsed), bool(parsed.state.flags & re.IGNORECASE)).best
    if not words or min(map(len, words)) < MIN_LITERAL:
        return None
    return tuple(sorted(words))


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
