"""Every failing test of a backend, classified: new on this PR, already failing, only on this backend, flaky, with a
flakiness score and since when it fails. The rules are written once, here, over rows that either case store gives
(``hud.stores.db.failing`` from PostgreSQL, ``hud.stores.clickhouse.failing`` from `oot_test_case`); which jobs to read
(the PR head's, the baseline's, the other backends') comes from ``hud.failing.queries``.

The classes (README "Failing tests"), for a test failing in a latest attempt of the backend's jobs at the target SHA:

- **baseline**: the backend's latest nightly or push run with a parsed test report whose upstream SHA is the PR's base
  SHA, else its latest such run finished before the PR's head was pushed (``Baseline.rule`` says which); for a
  nightly or push run, the previous run. Its jobs' latest attempts. None: "no baseline", and neither of the next two
  classes can be said;
- **new**: passed on the baseline; **already failing**: failed there too (a test the baseline did not run, or only
  skipped, is neither: ``baseline == "absent"``);
- **only here**: passed on at least one other backend that ran it at the same upstream SHA, and failed on none;
- **flaky**: passed after a rerun, or passed and failed at one SHA (two attempts, two reports of one job, or two
  results at one SHA among its last ``HISTORY`` results on the backend);
- **flakiness**: pass/fail flips over its last ``HISTORY`` results on the backend (skips left out), flips / (n - 1),
  0 to 1; None with fewer than two results;
- **since**: the oldest failure of its current streak of failures within those results (``streak``; the whole
  window when ``streak == HISTORY``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from hud.stores.base import CASE_COUNTED as COUNTED  # COUNTED: the results a flip is counted between
from hud.stores.base import CASE_FAILING as FAILING
from hud.stores.base import CASE_PASSED as PASSED
from hud.stores.base import CaseRows
from hud.stores.types import BackendInfo

HISTORY = 20  # results per test the flakiness score and "since" read
CAP = 500  # failing tests classified per backend and SHA (the first by test id); the total is always counted
BASELINE_EVENTS = ("nightly", "push")


# --- what the runs module gives: jobs of one backend at one SHA -------------------------------------------------------


@dataclass(frozen=True)
class RunJob:
    id: int
    column: str  # "workflow / job"
    outcome: str
    run_url: str


@dataclass(frozen=True)
class Run:
    """One backend's jobs at one upstream SHA for one event: their latest attempts, and every attempt's id."""

    backend_id: int
    event: str
    sha: str
    pr_number: int | None
    jobs: tuple[RunJob, ...]
    attempts: tuple[int, ...]
    finished_at: datetime


@dataclass(frozen=True)
class Baseline:
    """The run a target is compared with, and by which rule it was picked."""

    rule: str  # "base": the PR's base SHA; "before": the latest before the head was pushed; "previous": the run before
    run: Run

    @property
    def sha(self) -> str:
        return self.run.sha

    @property
    def event(self) -> str:
        return self.run.event

    @property
    def finished_at(self) -> datetime:
        return self.run.finished_at

    @property
    def job_id(self) -> int:
        return self.run.jobs[0].id

    @property
    def run_url(self) -> str:
        return self.run.jobs[0].run_url

    @property
    def rule_text(self) -> str:
        return {
            "base": "the run on the PR's base commit",
            "before": "the latest run finished before the PR's head was pushed (none on its base commit)",
            "previous": "the run before this one",
        }[self.rule]


@dataclass(frozen=True)
class Target:
    """What to classify: a backend's run (None when it has none there), its baseline and the other backends' jobs."""

    backend: BackendInfo
    run: Run | None
    baseline: Baseline | None
    others: dict[int, int] = field(default_factory=dict)  # other backends' latest attempts at the SHA: job → backend
    pr_number: int | None = None
    sha: str = ""


# --- what the rules give ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FailingTest:
    test_id: str
    status: str  # failed, error or xpass (the first failing case)
    message: str  # its first line
    job_id: int  # the first job it fails in
    jobs: tuple[str, ...]  # the columns it fails in
    baseline: str  # passed, failing, absent; "" without a baseline
    elsewhere: str  # passes, fails, not run (on the other backends at the same SHA)
    flaky_why: tuple[str, ...]
    flakiness: float | None
    results: int  # results read for the score (at most HISTORY)
    since: datetime | None
    since_sha: str
    streak: int

    @property
    def new(self) -> bool:
        return self.baseline == "passed"

    @property
    def already_failing(self) -> bool:
        return self.baseline == "failing"

    @property
    def only_here(self) -> bool:
        return self.elsewhere == "passes"

    @property
    def flaky(self) -> bool:
        return bool(self.flaky_why)

    @property
    def flakiness_pct(self) -> float | None:
        return None if self.flakiness is None else round(100 * self.flakiness, 1)

    @property
    def classes(self) -> tuple[str, ...]:
        named = {"passed": "new", "failing": "already failing", "absent": "not on baseline", "": "no baseline"}
        found = [named[self.baseline]]
        if self.only_here:
            found.append("only here")
        if self.flaky:
            found.append("flaky")
        return tuple(found)


@dataclass(frozen=True)
class BackendFailing:
    backend: BackendInfo
    sha: str
    event: str
    pr_number: int | None
    ran: bool  # the backend has jobs at the SHA
    baseline: Baseline | None
    tests: list[FailingTest]
    total: int  # failing tests at the SHA (``tests`` holds the first CAP)

    @property
    def new(self) -> int:
        return sum(t.new for t in self.tests)

    @property
    def already_failing(self) -> int:
        return sum(t.already_failing for t in self.tests)

    @property
    def only_here(self) -> int:
        return sum(t.only_here for t in self.tests)

    @property
    def flaky(self) -> int:
        return sum(t.flaky for t in self.tests)

    @property
    def label(self) -> str:
        return self.backend.device or self.backend.repo

    @property
    def summary(self) -> str:
        """ "2 new failures on npu, 14 already failing" (or what can be said without a baseline)."""
        if not self.total:
            return ""
        if self.baseline is None:
            return f"{self.total} failing test{plural(self.total)} on {self.label} (no baseline)"
        text = f"{self.new} new failure{plural(self.new)} on {self.label}, {self.already_failing} already failing"
        other = len(self.tests) - self.new - self.already_failing
        return text + (f", {other} not on the baseline" if other else "")


def plural(n: int) -> str:
    return "" if n == 1 else "s"


def summary_line(found: Iterable[BackendFailing]) -> str:
    """The PR page's line: each backend with failing tests, new failures counted apart."""
    return " · ".join(f.summary for f in found if f.summary)


# --- the rules, over a case store's rows -----------------------------------------------------------------------------


def by_job(rows: list[dict]) -> dict[int, list[dict]]:
    found: dict[int, list[dict]] = defaultdict(list)
    for r in rows:
        found[r["job_id"]].append(r)
    return found


def chosen_tests(target: Target, failing: dict[int, list[dict]]) -> tuple[list[str], int]:
    """The test ids the target classifies (the first CAP by id) and how many fail in all (``failing``: by job)."""
    jobs = target.run.jobs if target.run else ()
    ids = sorted({r["test_id"] for j in jobs for r in failing.get(j.id, ())})
    return ids[:CAP], len(ids)


@dataclass(frozen=True)
class Rows:
    """A case store's rows, indexed once for every target: failing cases and cases by job, history by (backend,
    test) newest first."""

    failing: dict[int, list[dict]]
    cases: dict[int, list[dict]]
    history: dict[tuple[int, str], list[dict]]

    @classmethod
    def of(cls, *, failing: dict[int, list[dict]], cases: list[dict], history: list[dict]) -> Rows:
        past: dict[tuple[int, str], list[dict]] = defaultdict(list)
        for r in history:
            past[r["backend_id"], r["test_id"]].append(r)
        return cls(failing, by_job(cases), past)

    def statuses(self, jobs: Iterable[int], tests: set[str]) -> dict[str, list[dict]]:
        """The cases of ``tests`` in ``jobs``, by test."""
        found: dict[str, list[dict]] = defaultdict(list)
        for job in jobs:
            for r in self.cases.get(job, ()):
                if r["test_id"] in tests:
                    found[r["test_id"]].append(r)
        return found


def classify(target: Target, rows: Rows) -> BackendFailing:
    """The target's failing tests with their classes, from the rows of ``failing_cases`` (the run's latest attempts),
    ``cases_of`` (every attempt at the SHA, the baseline's and the other backends' jobs) and ``history`` (newest first,
    at most HISTORY per backend and test)."""
    run, bid = target.run, target.backend.id
    chosen, total = chosen_tests(target, rows.failing)
    first: dict[str, dict] = {}
    failing_in: dict[str, list[str]] = defaultdict(list)
    for job in run.jobs if run else ():
        for r in rows.failing.get(job.id, ()):
            first.setdefault(r["test_id"], r)
            if job.column not in failing_in[r["test_id"]]:
                failing_in[r["test_id"]].append(job.column)
    tests_ = set(chosen)
    at_base = rows.statuses((j.id for j in target.baseline.run.jobs) if target.baseline else (), tests_)
    here = rows.statuses(run.attempts if run else (), tests_)
    elsewhere = rows.statuses(target.others, tests_)
    tests = []
    for t in chosen:
        past = rows.history.get((bid, t), [])
        tests.append(
            failing_test(
                first[t],
                jobs=tuple(failing_in[t]),
                baseline=baseline_status({r["status"] for r in at_base[t]}) if target.baseline else "",
                elsewhere=elsewhere_status({r["status"] for r in elsewhere[t]}),
                flaky_why=flaky_reasons(here[t], past),
                history=past,
            )
        )
    tests.sort(key=lambda t: (not t.new, not t.only_here, not t.flaky, t.test_id))
    return BackendFailing(
        backend=target.backend,
        sha=run.sha if run else target.sha,
        event=run.event if run else "pull_request",
        pr_number=run.pr_number if run else target.pr_number,
        ran=run is not None,
        baseline=target.baseline,
        tests=tests,
        total=total,
    )


def failing_test(row: dict, *, jobs, baseline: str, elsewhere: str, flaky_why, history: list[dict]) -> FailingTest:
    score, n = flakiness(r["status"] for r in history)
    since, since_sha, streak = failing_since(history)
    return FailingTest(
        test_id=row["test_id"],
        status=row["status"],
        message=(row["message"] or "").split("\n", 1)[0][:300],
        job_id=row["job_id"],
        jobs=jobs,
        baseline=baseline,
        elsewhere=elsewhere,
        flaky_why=flaky_why,
        flakiness=score,
        results=n,
        since=since,
        since_sha=since_sha,
        streak=streak,
    )


def baseline_status(statuses: set[str]) -> str:
    if statuses & set(FAILING):
        return "failing"
    return "passed" if PASSED in statuses else "absent"


def elsewhere_status(statuses: set[str]) -> str:
    if statuses & set(FAILING):
        return "fails"
    return "passes" if PASSED in statuses else "not run"


def flaky_reasons(here: list[dict], history: list[dict]) -> tuple[str, ...]:
    """Why a test is flaky: it passed after a rerun at this SHA, or passed and failed at one SHA (here, or among its
    recent results)."""
    reasons = []
    if any(r["status"] == PASSED and r["reruns"] > 0 for r in here):
        reasons.append("passed on rerun")
    outcomes = {r["status"] in FAILING for r in here if r["status"] in COUNTED}
    by_sha = defaultdict(set)
    for r in history:
        by_sha[r["job_sha"]].add(r["status"] in FAILING)
    if outcomes == {True, False} or any(seen == {True, False} for seen in by_sha.values()):
        reasons.append("passed and failed at one SHA")
    return tuple(reasons)


def flakiness(statuses: Iterable[str]) -> tuple[float | None, int]:
    """Flips between pass and fail over the results (in order) ÷ (results − 1), and the number of results."""
    failed = [s in FAILING for s in statuses if s in COUNTED]
    if len(failed) < 2:
        return None, len(failed)
    flips = sum(a != b for a, b in zip(failed, failed[1:], strict=False))
    return round(flips / (len(failed) - 1), 4), len(failed)


def failing_since(history: list[dict]) -> tuple[datetime | None, str, int]:
    """The time and SHA of the oldest failure of the current streak (history newest first), and its length."""
    streak = []
    for r in history:
        if r["status"] not in FAILING:
            break
        streak.append(r)
    if not streak:
        return None, "", 0
    return streak[-1]["at"], streak[-1]["job_sha"], len(streak)


# --- reading: one pass over the case store for any number of targets -------------------------------------------------


def classified(
    store: CaseRows, targets: list[Target], *, failing: dict[int, list[dict]] | None = None
) -> list[BackendFailing]:
    """Each target classified, from three reads of the case store whatever the number of targets (two when the
    failing cases of the targets' jobs are given, by job)."""
    ran = [t for t in targets if t.run]
    if failing is None:
        failing = by_job(store.failing_cases(job_ids=sorted(j.id for t in ran for j in t.run.jobs)) if ran else [])
    test_ids = sorted({test for t in ran for test in chosen_tests(t, failing)[0]})
    cases, history = [], []
    if test_ids:
        jobs = {job for t in ran for job in (*t.run.attempts, *t.others)}
        jobs |= {j.id for t in ran if t.baseline for j in t.baseline.run.jobs}
        cases = store.cases_of(job_ids=sorted(jobs), test_ids=test_ids)
        own = {t.backend.id: chosen_tests(t, failing)[0] for t in ran}
        history = store.history(tests={bid: tests for bid, tests in own.items() if tests}, limit=HISTORY)
    rows = Rows.of(failing=failing, cases=cases, history=history)
    return [classify(t, rows) for t in targets]
