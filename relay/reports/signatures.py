"""A failure line's signature: the line with what varies between occurrences masked, so that the same failure on
other jobs, backends or days groups under one key (the failures page, ``relay.reports.logs``)."""

import re

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
