"""Hypothesis strategies for hostile input: JSON documents, recorded bodies with fields replaced, token parts."""

import base64
import copy
import json
import re
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

# Values that broke the relay once (issue 13), or that a column, a parser or a driver may refuse.
HOSTILE_TEXT = [
    "",
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "²",
    "³",
    "٣٠",
    "7",
    "2024-02-30T10:00:00Z",
    "2024-02-01T25:00:00Z",
    "0001-01-01T00:00:00+05:00",
    "9999-12-31T23:59:59-05:00",
    "2026-11-20T10:15:30Z",
    "a" * 41,
    "f" * 5000,
    "https://github.com/" + "x" * 600,
    "https://example.com/run/1",
    "javascript:alert(1)",
    "NaN",
    "Infinity",
    "-1",
    "2147483648",
    "ü",
    "\u202e",
    "in_progress",
    "completed",
    "success",
    "failure",
    "opened",
    "synchronize",
    "rerequested",
    "refs/heads/main",
    "pytorch/pytorch",
    "org/repo",
]
HOSTILE_NUMBERS = [0, 1, -1, 2**31 - 1, 2**31, -(2**31) - 1, 2**63, 10**30, 0.5, 1e308]

# Any character, lone surrogates and NUL included (Hypothesis leaves out surrogates unless told).
any_text = st.text(st.characters(exclude_categories=()), max_size=30)
# A plausible value with a character PostgreSQL or UTF-8 cannot take put somewhere in it.
poisoned_text = st.builds(
    lambda text, bad, at: text[:at] + bad + text[at:],
    st.sampled_from(HOSTILE_TEXT),
    st.sampled_from(["\x00", "\ud800", "\udfff"]),
    st.integers(min_value=0, max_value=12),
)
hostile_text = st.sampled_from(HOSTILE_TEXT) | poisoned_text | any_text
numbers = st.integers() | st.sampled_from(HOSTILE_NUMBERS) | st.floats(allow_nan=True, allow_infinity=True)
scalars = st.none() | st.booleans() | numbers | hostile_text
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(hostile_text, children, max_size=4),
    max_leaves=12,
)
# Nesting up to 3,000 deep, kept as a marker until dumps(): copying or walking it would overflow our own stack.
DEEP = "\ue000deep:"
deep = st.integers(min_value=30, max_value=3000).map(lambda n: f"{DEEP}{n}")
hostile_values = hostile_text | numbers | json_values | deep


def paths(document: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value of ``document`` (keys and list indexes), the document itself first."""
    found = [prefix]
    if isinstance(document, dict):
        for key, value in document.items():
            found += paths(value, (*prefix, key))
    elif isinstance(document, list):
        for i, value in enumerate(document[:3]):
            found += paths(value, (*prefix, i))
    return found


def replaced(document: Any, path: tuple, value: Any) -> Any:
    """A copy of ``document`` with the value at ``path`` replaced (``...``: removed)."""
    if not path:
        return document if value is ... else value
    changed = copy.deepcopy(document)
    node = changed
    for step in path[:-1]:
        node = node[step]
    if value is ... and isinstance(node, dict):
        del node[path[-1]]
    elif value is not ...:
        node[path[-1]] = value
    return changed


@st.composite
def mutations(draw, document: Any, *, at_most: int = 3, focus: tuple[tuple, ...] = ()) -> Any:
    """``document`` with up to ``at_most`` of its values replaced by hostile ones (or removed). Paths under a
    prefix of ``focus`` (the fields the endpoint reads) are picked four times in five."""
    for _ in range(draw(st.integers(min_value=1, max_value=at_most))):
        where = paths(document)
        focused = [path for path in where for prefix in focus if path[: len(prefix)] == prefix]
        path = draw(st.sampled_from(focused) if focused and draw(st.integers(0, 4)) else st.sampled_from(where))
        document = replaced(document, path, draw(hostile_values | st.just(...)))
    return document


def dumps(document: Any) -> bytes:
    """JSON as a careless sender writes it: NaN and Infinity as literals, lone surrogates as escapes."""
    text = json.dumps(document, allow_nan=True)
    return re.sub(r'"\\ue000deep:(\d+)"', lambda m: "[" * int(m[1]) + "]" * int(m[1]), text).encode()


def b64url(value: Any) -> str:
    data = value if isinstance(value, bytes) else dumps(value)
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def query_string(params: dict[str, str]) -> str:
    return "&".join(f"{quote(k, errors='surrogatepass')}={quote(v, errors='surrogatepass')}" for k, v in params.items())
