"""One verdict per failure: what a failing test, and a failed job, most likely is. Stated once, here; the HUD's pages
and JSON, the check runs, the PR comment and the alerts all say these words (README "How we count").

A failing test's verdict is the first of these that holds (``TEST_ORDER``):

- **infra**: its job failed for the machine, not the code (the log classifier's class, or what the relay saw: the
  runner lost, timed out by the runner);
- **disabled**: the backend's disabled list holds it (``ootci.models.DisabledTest``, in force);
- **flaky**: it passed at the same upstream SHA (another attempt or report), passed on a rerun, or its flakiness —
  pass/fail flips over its last HISTORY results in the backend's nightly and push runs (a PR's failures are that
  PR's), a rerun pass counted as a flip — is at least
  FLAKY_THRESHOLD over at least FLAKY_MIN_RESULTS results (``flaky_evidence``: the evidence is always named);
- **broken-baseline**: it failed in the baseline run too (``ootci.baseline``: the one rule that picks it);
- **new**: none of the above: likely caused by this change (a baseline that did not run it, or none at all, cannot
  clear it);
- **unknown**: there is no per-test data (a failed job without a parsed test report).

A job's verdict is the first of ``JOB_ORDER`` any of its failing tests has: a job is only as innocent as its worst
failure. A failed job without failing tests is ``unknown``, unless the classifier or the relay says infra.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

INFRA, DISABLED, FLAKY, BROKEN, NEW, UNKNOWN = "infra", "disabled", "flaky", "broken-baseline", "new", "unknown"
TEST_ORDER = (INFRA, DISABLED, FLAKY, BROKEN, NEW, UNKNOWN)
JOB_ORDER = (NEW, UNKNOWN, BROKEN, FLAKY, DISABLED, INFRA)
EXONERABLE = frozenset({INFRA, DISABLED, FLAKY, BROKEN})  # verdicts a check run may conclude neutral on
MEANING = {
    INFRA: "the machine failed, not the code (log classifier or relay facts)",
    DISABLED: "on the backend's disabled list",
    FLAKY: "passed at the same SHA or on a rerun, or flips between pass and fail",
    BROKEN: "failing in the baseline run too",
    NEW: "passed in the baseline run, or no baseline can clear it: likely this change",
    UNKNOWN: "no per-test data",
}

HISTORY = 20  # results per test the flakiness score reads: the backend's baseline runs (other PRs' failures are theirs)
BASELINE_EVENTS = ("nightly", "push")
FLAKY_THRESHOLD = 0.15  # flakiness from which a test is flaky on its history alone: 3 flips in 20 results
FLAKY_MIN_RESULTS = 5  # results the score needs before it can call a test flaky
PASSED = "passed"
FAILING = ("failed", "error", "xpass")
COUNTED = (PASSED, *FAILING)


def failing_test_verdict(*, infra: bool, disabled: bool, flaky: bool, baseline: str) -> str:
    """``baseline``: the test's status in the baseline run: "failing", "passed", "absent" (not run there), or ""
    (no baseline)."""
    if infra:
        return INFRA
    if disabled:
        return DISABLED
    if flaky:
        return FLAKY
    return BROKEN if baseline == "failing" else NEW


def job_verdict(verdicts: Iterable[str], *, infra: bool) -> str:
    """The worst of its failing tests' verdicts; without any, infra when the classifier or relay says so."""
    found = set(verdicts)
    if not found:
        return INFRA if infra else UNKNOWN
    return next(v for v in JOB_ORDER if v in found)


@dataclass(frozen=True)
class Flaky:
    evidence: tuple[str, ...]  # empty: not flaky
    flakiness: float | None  # flips ÷ (results − 1); None under two results
    results: int

    @property
    def flaky(self) -> bool:
        return bool(self.evidence)


def flaky_evidence(here: Iterable[dict], history: Iterable[dict], *, sha: str) -> Flaky:
    """Whether a test is flaky, and why. ``here``: its cases at this SHA, ``sha`` (every attempt: ``status``,
    ``reruns``); ``history``: its last results on the backend, newest first (``status``, ``job_sha``, ``reruns``).
    The score reads the results here, then those before at other SHAs (HISTORY in all), and counts a pass after
    reruns as a flip: whatever made a test flaky is in the rows the score reads, so "flaky" never sits beside 0 %."""
    here, history = list(here), list(history)
    evidence = []
    if any(r["status"] == PASSED and r.get("reruns", 0) > 0 for r in here):
        evidence.append("passed on rerun")
    outcomes = {r["status"] in FAILING for r in here if r["status"] in COUNTED}
    by_sha: dict[str, set[bool]] = defaultdict(set)
    for r in history:
        if r["status"] in COUNTED:
            by_sha[r["job_sha"]].add(r["status"] in FAILING)
    if outcomes == {True, False} or any(seen == {True, False} for seen in by_sha.values()):
        evidence.append("passed and failed at one SHA")
    here_read = sorted((r for r in here if r["status"] in COUNTED), key=lambda r: r["status"] == PASSED)
    read = here_read + [r for r in history if r["job_sha"] != sha]  # at this SHA: its failures, then its passes
    score, n = flakiness(read[:HISTORY])
    if score is not None and n >= FLAKY_MIN_RESULTS and score >= FLAKY_THRESHOLD:
        evidence.append(f"flakiness {100 * score:.0f} % over its last {n} results")
    return Flaky(tuple(evidence), score, n)


def flakiness(rows: Iterable[dict]) -> tuple[float | None, int]:
    """Flips between pass and fail over the results (in order; a pass after reruns is a fail then a pass) ÷
    (results − 1), and the number of results."""
    failed: list[bool] = []
    n = 0
    for r in rows:
        if r["status"] not in COUNTED:
            continue
        n += 1
        if r["status"] == PASSED and r.get("reruns", 0) > 0:
            failed += [False, True]  # newest first: the pass, then the failures before it
        else:
            failed.append(r["status"] in FAILING)
    if n < 2 and len(failed) < 2:
        return None, n
    flips = sum(a != b for a, b in zip(failed, failed[1:], strict=False))
    return round(min(1.0, flips / max(1, n - 1)), 4), n


def job_disabled_tests(test_ids: Iterable[str], entries: Iterable[tuple[str, str, str, str]]) -> set[str]:
    """The test ids on a disabled list: ``entries`` as (name, kind, test_name, class_name) rows of DisabledTest in
    force. A generic entry names the test id; a PyTorch name ``test_x (__main__.TestY)`` the id's last two parts."""
    generic, pytorch = set(), set()
    for name, kind, test, klass in entries:
        if kind == "generic":
            generic.add(name)
        else:
            pytorch.add((test, klass))
    found = set()
    for t in test_ids:
        parts = t.split("::")
        if t in generic or (len(parts) >= 2 and (parts[-1], parts[-2].rpartition(".")[2]) in pytorch):
            found.add(t)
    return found


# --- exoneration: when a failed job's check run may conclude neutral -------------------------------------------------

MASS_FAILURE = 0.8  # a job with more than this share of its tests failing is never exonerated
BASELINE_MAX_DAYS = 7  # a baseline older than this clears nothing
CRASH_WORDS = ("segmentation fault", "sigsegv", "sigbus", "sigill", "sigfpe", "core dumped", "fatal python error")


def exoneration_refused(
    verdict: str,
    *,
    failing: int,
    counted: int,
    failure_class: str,
    failure_line: str,
    baseline_age_days: float | None,
    broken_baseline: bool,
) -> str:
    """Why a failed job may not be exonerated ("" when it may): its verdict, a crash of the tested process (the
    runner's own shutdown signal is classified infra), most of its tests failing, a stale baseline."""
    if verdict not in EXONERABLE:
        return f"its verdict is {verdict}"
    line = failure_line.lower()
    if failure_class != INFRA and any(word in line for word in CRASH_WORDS):
        return "the tested process crashed"
    if counted and failing > MASS_FAILURE * counted:
        return f"{failing} of its {counted} tests failed (over {100 * MASS_FAILURE:.0f} %)"
    if broken_baseline and (baseline_age_days is None or baseline_age_days > BASELINE_MAX_DAYS):
        return f"its baseline is older than {BASELINE_MAX_DAYS} days"
    return ""
