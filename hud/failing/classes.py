"""Every failing test of a backend, classified: new on this PR, already failing, only on this backend, flaky, with a
flakiness score and since when it fails. The rules are written once, here, over the rows a case store gives
(``hud.stores.db.failing``); which jobs to read (the PR head's, the baseline's, the other backends') comes from
``hud.failing.queries``.

The classes (README "Failing tests"), for a test failing in a latest attempt of the backend's jobs at the target SHA:

- **baseline**: the backend's latest nightly or push run with a parsed test report whose upstream SHA is the PR's base
  SHA, else its latest such run finished before the PR's head was pushed (``Baseline.rule`` says which); for a
  nightly or push run, the previous run. Its jobs' latest attempts. None: "no baseline", and neither of the next two
  classes can be said;
- **verdict**: ``ootci.verdicts`` (infra, disabled, flaky, broken-baseline, new), from the baseline status
  (passed, failing, or absent: not run or only skipped there), the backend's disabled list, the flaky evidence and
  the job's outcome; **new** and **already failing** count the verdicts ``new`` and ``broken-baseline``;
- **only here**: passed on at least one other backend that ran it at the same upstream SHA, and failed on none;
- **flaky** and **flakiness**: ``ootci.verdicts.flaky_evidence``, the one definition (the badge names its evidence);
- **since**: the oldest failure of its current streak of failures within those results (``streak``; the whole
  window when ``streak == HISTORY``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from hud.stores.base import CASE_FAILING as FAILING
from hud.stores.base import CASE_PASSED as PASSED
from hud.stores.base import CaseRows
from hud.stores.types import BackendInfo
from ootci import verdicts
from ootci.baseline import RULES, baseline_status
from ootci.verdicts import HISTORY

CAP = 500  # failing tests classified per backend and SHA (the first by test id); the total is always counted


# --- what the runs module gives: jobs of one backend at one SHA -------------------------------------------------------


@dataclass(frozen=True)
class RunJob:
    id: int
    column: str  # "workflow / job"
    outcome: str
    run_url: str
    failure_class: str = ""  # the log classifier's (or a relay fact's): "infra" makes its failing tests infra


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
        return RULES[self.rule]


@dataclass(frozen=True)
class Target:
    """What to classify: a backend's run (None when it has none there), its baseline and the other backends' jobs."""

    backend: BackendInfo
    run: Run | None
    baseline: Baseline | None
    others: dict[int, int] = field(default_factory=dict)  # other backends' latest attempts at the SHA: job → backend
    pr_number: int | None = None
    sha: str = ""
    disabled: frozenset[str] = frozenset()  # its failing tests on the backend's disabled list


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
    verdict: str = verdicts.NEW  # ootci.verdicts: infra, disabled, flaky, broken-baseline, new

    @property
    def new(self) -> bool:
        return self.verdict == verdicts.NEW

    @property
    def already_failing(self) -> bool:
        return self.verdict == verdicts.BROKEN

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
        named = {"passed": "passed on baseline", "failing": "failing on baseline", "absent": "not on baseline"}
        found = [named.get(self.baseline, "no baseline")]
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
    def verdict(self) -> str:
        """The verdict of the backend's failing tests taken together (``ootci.verdicts.job_verdict``)."""
        return verdicts.job_verdict((t.verdict for t in self.tests), infra=False) if self.tests else ""

    @property
    def summary(self) -> str:
        """ "2 new failures on npu, 14 broken-baseline, 1 flaky" (no baseline: said)."""
        if not self.total:
            return ""
        counts = {v: sum(t.verdict == v for t in self.tests) for v in verdicts.TEST_ORDER}
        text = f"{self.new} new failure{plural(self.new)} on {self.label}"
        text += "".join(f", {n} {v}" for v, n in counts.items() if n and v != verdicts.NEW)
        return text + ("" if self.baseline else " (no baseline)")


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
    def of(
        cls, *, failing: dict[int, list[dict]], cases: list[dict], history: dict[tuple[int, str], list[dict]]
    ) -> Rows:
        return cls(failing, by_job(cases), history)

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
    infra = {j.id for j in run.jobs if j.failure_class == verdicts.INFRA} if run else set()  # as ootci.baseline
    tests = []
    for t in chosen:
        past = rows.history.get((bid, t), [])
        flaky = verdicts.flaky_evidence(here[t], past, sha=run.sha)
        status = baseline_status({r["status"] for r in at_base[t]}) if target.baseline else ""
        tests.append(
            failing_test(
                first[t],
                jobs=tuple(failing_in[t]),
                baseline=status,
                elsewhere=elsewhere_status({r["status"] for r in elsewhere[t]}),
                flaky=flaky,
                history=past,
                verdict=verdicts.failing_test_verdict(
                    infra=first[t]["job_id"] in infra, disabled=t in target.disabled, flaky=flaky.flaky, baseline=status
                ),
            )
        )
    tests.sort(key=lambda t: (verdicts.JOB_ORDER.index(t.verdict), not t.only_here, t.test_id))
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


def failing_test(
    row: dict, *, jobs, baseline: str, elsewhere: str, flaky: verdicts.Flaky, history: list[dict], verdict: str
) -> FailingTest:
    since, since_sha, streak = failing_since(history)
    return FailingTest(
        test_id=row["test_id"],
        status=row["status"],
        message=(row["message"] or "").split("\n", 1)[0][:300],
        job_id=row["job_id"],
        jobs=jobs,
        baseline=baseline,
        elsewhere=elsewhere,
        flaky_why=flaky.evidence,
        flakiness=flaky.flakiness,
        results=flaky.results,
        since=since,
        since_sha=since_sha,
        streak=streak,
        verdict=verdict,
    )


def elsewhere_status(statuses: set[str]) -> str:
    if statuses & set(FAILING):
        return "fails"
    return "passes" if PASSED in statuses else "not run"


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
    cases, history = [], {}
    if test_ids:
        jobs = {job for t in ran for job in (*t.run.attempts, *t.others)}
        jobs |= {j.id for t in ran if t.baseline for j in t.baseline.run.jobs}
        cases = store.cases_of(job_ids=sorted(jobs), test_ids=test_ids)
        own = {t.backend.id: chosen_tests(t, failing)[0] for t in ran}
        history = store.history(tests={bid: tests for bid, tests in own.items() if tests}, limit=HISTORY)
    rows = Rows.of(failing=failing, cases=cases, history=history)
    return [classify(t, rows) for t in targets]
