"""The rules of breaks (README "Breaks"), stated once: how a break's suspect commits are ranked, which files a failure
names, and where a bisection goes next. Pure functions: ``relay.breaks`` feeds them what GitHub and the database say.

Suspects are the upstream commits in (N−1, N] (N: the baseline run where the tests newly fail, N−1: the previous
one), each by its merged PR, in tiers (``TIERS``), the first that holds:

- **strong**: the backend's PR-time run of that PR failed one of the break's tests, as a new failure there (its
  verdict, ``ootci.verdicts``, was ``new``: passed at that run's own baseline);
- **medium**: the PR touched a file the failure's traceback names, or the test's own file;
- **untested**: the backend never ran that PR (or it is a commit without a PR);
- **passed**: its PR-time run passed the tests (weak, not excluded: a flaky pass, a test not run on the PR).

Within a tier: more tests (or files) named first, then the newest commit (closest to N).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

# Who may ask for a bisection: the admin's "redispatch" permission (a bisection sends dispatches), checked by the
# relay's endpoint and by the HUD before it shows the button.
BISECT_PERMISSION = "ootci.change_dispatch"
STRONG, MEDIUM, UNTESTED, PASSED = "strong", "medium", "untested", "passed"
TIERS = (STRONG, MEDIUM, UNTESTED, PASSED)
MEANING = {
    STRONG: "its PR-time run on the backend failed the test (new there)",
    MEDIUM: "it touched a file the failure names, or the test's file",
    UNTESTED: "not tested on the backend before it merged",
    PASSED: "its PR-time run on the backend passed the test",
}
SOURCE_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*\.(?:py|pyi|cpp|cc|c|h|hpp|cu|cuh|yaml)\b")
PATH_ROOTS = ("site-packages/", "dist-packages/")


@dataclass(frozen=True)
class Candidate:
    """One commit of the range, and what is known of it on the break's backends."""

    sha: str
    position: int  # 0: the oldest in the range
    pr_number: int | None = None
    files: tuple[str, ...] = ()
    failed: tuple[dict, ...] = ()  # evidence of PR-time runs that failed a test of the break, new there
    passed: tuple[dict, ...] = ()  # evidence of PR-time runs that passed them
    tested: bool = False  # some PR-time run on a backend of the break has results for its tests


@dataclass(frozen=True)
class Ranked:
    candidate: Candidate
    tier: str
    evidence: list[dict] = field(default_factory=list)


def named_files(messages: Iterable[str], test_files: Iterable[str]) -> set[str]:
    """The source files a failure names (its traceback's ``File "…"`` lines and any path in its message), and the
    tests' own files, each as a path relative to its repository where it can tell (after ``site-packages/``)."""
    found = set()
    for text in messages:
        for path in SOURCE_FILE.findall(text or ""):
            found.add(_relative(path))
    found |= {_relative(f) for f in test_files if f}
    return {f for f in found if f}


def _relative(path: str) -> str:
    for root in PATH_ROOTS:
        if root in path:
            path = path.split(root, 1)[1]
    return path.lstrip("./")


def file_matches(touched: Iterable[str], named: set[str]) -> list[str]:
    """The files a PR touched that the failure names: the same path, or one ending the other at a ``/``."""
    found = []
    for f in touched:
        if any(f == n or f.endswith("/" + n) or n.endswith("/" + f) for n in named):
            found.append(f)
    return found


def rank(candidates: Iterable[Candidate], *, named: set[str]) -> list[Ranked]:
    """The candidates in order, the likeliest first, each with its tier and evidence."""
    ranked = []
    for c in candidates:
        matched = file_matches(c.files, named)
        evidence = [*c.failed]
        evidence += [{"kind": "file", "text": f"touched {f}", "url": ""} for f in matched[:10]]
        evidence += [*c.passed]
        if c.failed:
            tier = STRONG
        elif matched:
            tier = MEDIUM
        elif not c.tested:
            tier = UNTESTED
            evidence.append({"kind": "untested", "text": "not tested on the backend before it merged", "url": ""})
        else:
            tier = PASSED
        key = (TIERS.index(tier), bool(c.passed), -len(c.failed), -len(matched), -c.position)
        ranked.append((key, Ranked(c, tier, evidence)))
    ranked.sort(key=lambda r: r[0])
    return [r for _, r in ranked]


# --- bisection --------------------------------------------------------------------------------------------------------

GOOD, BAD, INCONCLUSIVE = "good", "bad", "inconclusive"


@dataclass(frozen=True)
class Next:
    """Where a bisection goes: ``sha`` to dispatch, or ``done`` with the culprit ("" when it stopped without one)."""

    sha: str = ""
    done: bool = False
    culprit: str = ""
    why: str = ""


def bisect_next(commits: list[str], known: dict[str, str], *, inconclusive: int) -> Next:
    """The next commit to test in ``commits`` (oldest first; the last is N, known bad; N−1, before the first, is
    good), given the results ``known`` of commits already tested (good, bad or inconclusive: by a baseline run or an
    earlier step, never dispatched again). It stops at one commit, or once runs were inconclusive twice."""
    if not commits:
        return Next(done=True, why="no commit in the range")
    lo, hi = -1, len(commits) - 1  # lo: the newest known good (-1: N−1); hi: the oldest known bad
    for i, sha in enumerate(commits):
        if known.get(sha) == BAD:
            hi = min(hi, i)
    for i, sha in enumerate(commits[:hi]):
        if known.get(sha) == GOOD:
            lo = max(lo, i)
    if hi - lo <= 1:
        return Next(done=True, culprit=commits[hi], why=f"{commits[hi][:12]} is the first commit that fails")
    if inconclusive >= 2:
        return Next(done=True, why="runs were inconclusive twice")
    open_ = [i for i in range(lo + 1, hi) if known.get(commits[i]) != INCONCLUSIVE]
    if not open_:
        return Next(done=True, why="every commit left was inconclusive")
    mid = (lo + hi) // 2
    pick = min(open_, key=lambda i: (abs(i - mid), i))  # the midpoint, else its nearest neighbour not yet tried
    return Next(sha=commits[pick])
