"""A failure rule's regex: compiled for RE2, the linear-time engine the classifier matches with, and checked at save.

RE2 (``google-re2``) matches in time linear in the line whatever the pattern, so no rule can pin a worker, however it
nests its repeats; in exchange it has no lookarounds, backreferences, atomic groups or possessive repeats, and a rule
using one is refused with a message that names it. Its own module (no models): the FailureRule model checks itself
with it, ``ootci.failures.rules``' import checks files, and ``relay.reports.classify`` compiles with it.
"""

import functools
import re

import re2

REGEX_MAX_LENGTH = 2000

# What RE2 does not do, as people write it, and what to call it in the refusal.
UNSUPPORTED = [
    (re.compile(r"\(\?<?="), "a lookahead or lookbehind (?=…) / (?<=…)"),
    (re.compile(r"\(\?<?!"), "a negative lookahead or lookbehind (?!…) / (?<!…)"),
    (re.compile(r"\(\?P="), "a named backreference (?P=…)"),
    (re.compile(r"(?<!\\)\\[1-9]"), r"a backreference \1"),
    (re.compile(r"\(\?>"), "an atomic group (?>…)"),
    (re.compile(r"(?<!\\)[*+?}]\+"), "a possessive repeat such as a*+"),
]


class Unusable(ValueError):
    """The regex cannot be a rule; the message says why and what to change."""


def _options(*, log_errors: bool = False) -> re2.Options:
    options = re2.Options()
    options.log_errors = log_errors  # a refused pattern is our answer to give, not a line on the worker's stderr
    return options


@functools.lru_cache(maxsize=4096)
def compiled(pattern: str, *, multiline: bool = False):
    """``pattern`` compiled for RE2 (``multiline``: ^ and $ at every line of a block), or Unusable. Kept per pattern
    (a compiled RE2 is immutable and safe to share between threads): every log asks for every rule's."""
    if len(pattern) > REGEX_MAX_LENGTH:
        raise Unusable(f"The regex is {len(pattern)} characters long; at most {REGEX_MAX_LENGTH}.")
    try:
        return re2.compile(("(?m)" if multiline else "") + pattern, _options())
    except re2.error as e:
        for construct, name in UNSUPPORTED:
            if construct.search(pattern):
                message = f"Rules run on RE2, a linear-time engine, which does not support {name}"
                raise Unusable(f"{message}: rewrite the regex without it.") from e
        detail = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
        raise Unusable(f"Not a valid regular expression for RE2: {detail}.") from e


def regex_problem(pattern: str) -> str:
    """Why ``pattern`` cannot be a rule ("" if it can): empty, too long, not valid for RE2 (or using what RE2 does not
    do), or matching an empty line (so every log)."""
    if not pattern.strip():
        return "The regex is empty."
    try:
        regex = compiled(pattern)
    except Unusable as e:
        return str(e)
    if regex.search("") is not None:
        return "The regex matches an empty line, so it would match every log."
    return ""
