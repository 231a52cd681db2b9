"""The save-time check of a failure rule's regex: valid, not matching every line, and not catastrophically slow.

Its own module (no models): the FailureRule model checks itself with it, and ootci.failures.rules' import checks files.
"""

import json
import re
import subprocess
import sys

REGEX_MAX_LENGTH = 2000
# The adversarial lines a rule must get through, all of them within REGEX_TIME_LIMIT seconds in a fresh interpreter:
# a catastrophically backtracking pattern ((a+)+$, (.*)*x, .*.*.*=) takes minutes on them; a sane one microseconds.
ADVERSARIAL_LENGTH = 4096
REGEX_TIME_LIMIT = 5.0

_CHECK = """
import json, re, sys
pattern, lines = json.loads(sys.stdin.read())
compiled = re.compile(pattern)
for line in lines:
    compiled.search(line)
"""


def adversarial_lines(pattern: str) -> list[str]:
    """Long lines made of the pattern's own characters (and common log characters), each with a spoiler at the end:
    what makes a backtracking regex try every way of splitting them."""
    chars = sorted({c for c in pattern if c.isprintable()} | set("a0 /.-=:_"))
    lines = []
    for c in chars:
        lines += [c * ADVERSARIAL_LENGTH, c * (ADVERSARIAL_LENGTH - 1) + "\x00"]
    pairs = "".join(ch for ch in pattern if ch.isalnum())[:8] or "ab"
    lines.append((pairs * ADVERSARIAL_LENGTH)[:ADVERSARIAL_LENGTH] + "\x00")
    lines.append(("a " * ADVERSARIAL_LENGTH)[:ADVERSARIAL_LENGTH] + "!")
    return lines


def regex_problem(pattern: str) -> str:
    """Why ``pattern`` cannot be a rule ("" if it can): not a valid regex, matching an empty line (so every log),
    or too slow on adversarial lines (checked in a subprocess that is killed at the time limit)."""
    if not pattern.strip():
        return "The regex is empty."
    if len(pattern) > REGEX_MAX_LENGTH:
        return f"The regex is {len(pattern)} characters long; at most {REGEX_MAX_LENGTH}."
    try:
        compiled = re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as e:
        return f"Not a valid regular expression: {e}."
    if compiled.search(""):
        return "The regex matches an empty line, so it would match every log."
    try:
        subprocess.run(
            [sys.executable, "-I", "-c", _CHECK],
            input=json.dumps([pattern, adversarial_lines(pattern)]),
            text=True,
            timeout=REGEX_TIME_LIMIT,
            check=True,
            capture_output=True,
        )
    except subprocess.TimeoutExpired:
        return (
            f"The regex backtracks catastrophically: it took over {REGEX_TIME_LIMIT:.0f} s on lines of "
            f"{ADVERSARIAL_LENGTH} characters. Avoid nested or adjacent repeats such as (a+)+ or .*.*."
        )
    except subprocess.CalledProcessError as e:
        return f"The regex could not be checked: {e.stderr.strip()[-300:]}"
    return ""
