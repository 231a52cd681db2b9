"""The one baseline rule, and each failed job's verdict from it (``ootci.verdicts``) on the system of record.

**Baseline** of a backend's run on a PR: its nightly or push run with a parsed test report at the PR's base commit,
else its latest such run finished before the PR's head was pushed; of a nightly or push run: the run before it. The
HUD's failing-tests views (``hud.failing``), the check runs, the PR comment and the alerts all take it from here.

``jobs_verdicts`` gives each failed job its verdict, its failing tests' verdicts and their evidence, read from the
database (TestCase: every case, passes included), a few indexed queries per backend and SHA.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, F, OuterRef, Q, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from ootci import levels, verdicts
from ootci.models import Delivery, DisabledTest, Event, Exoneration, JobFailure, JobResult, TestCase, TestReport

BASELINE_EVENTS = verdicts.BASELINE_EVENTS
GITHUB_RUN_ID = re.compile(r"^[0-9]{1,20}$")
TESTS_LISTED = 50  # failing tests a check run's verdict lists
FAILED = (JobResult.Outcome.TEST, JobResult.Outcome.INFRA)
RULES = {
    "base": "the run on the PR's base commit",
    "before": "the latest run finished before the PR's head was pushed (none on its base commit)",
    "previous": "the run before this one",
}
CAP = 500  # failing tests given a verdict per job (the first by test id); the job's verdict reads them all


def baseline_jobs(backend_ids: list[int]):
    """The backends' nightly and push jobs with test results: a parsed test report, or the callback's counts."""
    parsed = TestReport.objects.filter(job=OuterRef("pk"), state=TestReport.State.PARSED)
    jobs = JobResult.objects.filter(backend_id__in=backend_ids, event_type__in=BASELINE_EVENTS)
    return jobs.filter(Exists(parsed) | Q(passed__isnull=False) | Q(failed__gt=0))


def newest_runs(jobs) -> dict[int, tuple[str, str]]:
    """Per backend, the (event, SHA) of its newest job of ``jobs`` by finish time: one query for any number."""
    newest = [F("finished_at").desc(), F("id").desc()]
    ranked = jobs.annotate(n=Window(RowNumber(), partition_by=F("backend_id"), order_by=newest)).filter(n=1)
    return {
        r["backend_id"]: (r["event_type"], r["job_sha"]) for r in ranked.values("backend_id", "event_type", "job_sha")
    }


def pr_baselines(
    backend_ids: list[int], *, base_sha: str, pushed_at: datetime | None
) -> dict[int, tuple[str, tuple[str, str]]]:
    """Per backend, (rule, (event, SHA)) of its baseline run for a PR: its run on the base commit, else its latest
    finished before the head was pushed (none without either)."""
    jobs = baseline_jobs(backend_ids)
    found: dict[int, tuple[str, tuple[str, str]]] = {}
    if base_sha:
        found = {bid: ("base", key) for bid, key in newest_runs(jobs.filter(job_sha=base_sha)).items()}
    missing = [bid for bid in backend_ids if bid not in found]
    if pushed_at and missing:
        before = newest_runs(jobs.filter(backend_id__in=missing, finished_at__lte=pushed_at))
        found |= {bid: ("before", key) for bid, key in before.items()}
    return found


def previous_baseline(backend_id: int, *, sha: str, started_at: datetime) -> tuple[str, str] | None:
    """The (event, SHA) of the backend's baseline run before its run at ``sha`` that started at ``started_at``."""
    jobs = baseline_jobs([backend_id]).filter(finished_at__lte=started_at).exclude(job_sha=sha)
    return newest_runs(jobs).get(backend_id)


def pr_pushed(number: int, head: str, *, first_job_at: datetime | None = None) -> tuple[str, datetime | None]:
    """The PR's base SHA ("" if unknown) and when its head was first pushed (its first delivery, else
    ``first_job_at``), from the deliveries of that head."""
    deliveries = Delivery.objects.filter(pull_request__number=number, head_sha=head).order_by("received_at")
    found = list(deliveries.values_list("received_at", "payload__pull_request__base__sha"))
    base = next((str(sha)[:40] for _, sha in found if sha), "")
    return base, (found[0][0] if found else first_job_at)


def latest_attempts(jobs) -> list[JobResult]:
    """The latest attempt of each job among ``jobs`` (a queryset)."""
    return latest_of(jobs.order_by(*JobResult.LATEST_ORDER))


def latest_of(attempts) -> list[JobResult]:
    """The latest attempt of each job among ``attempts``, given newest first (``JobResult.LATEST_ORDER``)."""
    found: dict[tuple, JobResult] = {}
    for j in attempts:
        found.setdefault(tuple(getattr(j, f) for f in JobResult.JOB_FIELDS), j)
    return list(found.values())


# --- verdicts of failed jobs ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TestVerdict:
    test_id: str
    verdict: str
    baseline: str  # failing, passed, absent; "" without a baseline
    evidence: tuple[str, ...]
    flakiness: float | None
    message: str


@dataclass(frozen=True)
class JobVerdict:
    job_id: int
    verdict: str
    tests: list[TestVerdict] = field(default_factory=list)
    failing: int = 0  # failing tests in all (``tests`` holds the first CAP)
    counted: int = 0  # tests with a pass or failure in the job's cases
    baseline_rule: str = ""
    baseline_sha: str = ""
    baseline_finished_at: datetime | None = None
    baseline_jobs: tuple[int, ...] = ()

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = defaultdict(int)
        for t in self.tests:
            found[t.verdict] += 1
        return dict(found)


def jobs_verdicts(jobs: list[JobResult]) -> dict[int, JobVerdict]:
    """The verdict of each failed (test or infra) job among ``jobs``; jobs that did not fail are left out."""
    failed = [j for j in jobs if j.outcome in (JobResult.Outcome.TEST, JobResult.Outcome.INFRA)]
    if not failed:
        return {}
    rows = TestCase.objects.filter(job_id__in=[j.pk for j in failed]).order_by("job_id", "test_id", "id")
    cases: dict[int, list[dict]] = defaultdict(list)
    for r in rows.values("job_id", "test_id", "status", "reruns", "message"):
        cases[r["job_id"]].append(r)
    by_group: dict[tuple[int, str, str], list[JobResult]] = defaultdict(list)
    for j in failed:
        by_group[j.backend_id, j.event_type, j.job_sha].append(j)
    found = {}
    for (backend_id, event, sha), group in by_group.items():
        found |= _group_verdicts(backend_id, event, sha, group, cases)
    return found


def _group_verdicts(backend_id: int, event: str, sha: str, jobs: list[JobResult], cases) -> dict[int, JobVerdict]:
    # A job's failing tests: its parsed reports' failing cases, else the names its callback gave.
    failing = {}
    for j in jobs:
        ids = sorted({r["test_id"] for r in cases[j.pk] if r["status"] in verdicts.FAILING})
        failing[j.pk] = ids or sorted(set(_callback_named(j)))
    tests = sorted({t for ids in failing.values() for t in ids[:CAP]})
    if not tests:
        return {j.pk: JobVerdict(j.pk, verdicts.job_verdict((), infra=_infra(j))) for j in jobs}
    baseline = _baseline_of(backend_id, event, sha, jobs[0])
    base_jobs = _run_jobs(backend_id, *baseline[1]) if baseline else ()
    at_base = _statuses(base_jobs, tests)
    here_ids = JobResult.objects.filter(backend_id=backend_id, event_type=event, job_sha=sha).values_list("pk")
    here = defaultdict(list)
    for r in TestCase.objects.filter(job_id__in=here_ids, test_id__in=tests).values("test_id", "status", "reruns"):
        here[r["test_id"]].append(r)
    past = baseline_history(backend_id, tests)
    entries = DisabledTest.objects.active().filter(backend_id=backend_id)
    disabled = verdicts.job_disabled_tests(tests, entries.values_list("name", "kind", "test_name", "class_name"))
    finished = None
    if base_jobs:
        finished = max(JobResult.objects.filter(pk__in=base_jobs).values_list("finished_at", flat=True), default=None)
    found = {}
    for j in jobs:
        first = {}
        for r in cases[j.pk]:
            if r["status"] in verdicts.FAILING:
                first.setdefault(r["test_id"], r)
        tv = []
        for t in failing[j.pk][:CAP]:
            status = baseline_status(at_base.get(t, set())) if baseline else ""
            flaky = verdicts.flaky_evidence(here[t], past[t], sha=sha)
            v = verdicts.failing_test_verdict(
                infra=_infra(j), disabled=t in disabled, flaky=flaky.flaky, baseline=status
            )
            message = (first.get(t, {}).get("message") or "").split("\n", 1)[0][:300]
            tv.append(TestVerdict(t, v, status, flaky.evidence, flaky.flakiness, message))
        counted = len({r["test_id"] for r in cases[j.pk] if r["status"] in verdicts.COUNTED})
        counted = counted or (j.passed or 0) + (j.failed or 0)  # the callback's counts, without a report
        found[j.pk] = JobVerdict(
            j.pk,
            verdicts.job_verdict([t.verdict for t in tv], infra=_infra(j)),
            tv,
            failing=len(failing[j.pk]),
            counted=counted,
            baseline_rule=baseline[0] if baseline else "",
            baseline_sha=baseline[1][1] if baseline else "",
            baseline_finished_at=finished,
            baseline_jobs=tuple(base_jobs),
        )
    return found


def _infra(job: JobResult) -> bool:
    """The classifier or a relay fact says infra: a failure not yet classified is not infra, but unknown."""
    return job.failure_class == "infra"


def _baseline_of(backend_id: int, event: str, sha: str, job: JobResult) -> tuple[str, tuple[str, str]] | None:
    if event in BASELINE_EVENTS:
        started = job.created_at
        key = previous_baseline(backend_id, sha=sha, started_at=started)
        return ("previous", key) if key else None
    if not job.pr_number:
        return None
    base, pushed = pr_pushed(job.pr_number, job.head_sha or sha, first_job_at=job.created_at)
    return pr_baselines([backend_id], base_sha=base, pushed_at=pushed).get(backend_id)


def _run_jobs(backend_id: int, event: str, sha: str) -> tuple[int, ...]:
    """The latest attempts of the backend's jobs in its run at (event, SHA)."""
    jobs = JobResult.objects.filter(backend_id=backend_id, event_type=event, job_sha=sha)
    return tuple(sorted(j.pk for j in latest_attempts(jobs.only(*JobResult.JOB_FIELDS, "created_at", "run_attempt"))))


def _statuses(job_ids, tests: list[str]) -> dict[str, set[str]]:
    """Each test's statuses in the jobs: their parsed cases, and "failed" where a job's callback named it."""
    found: dict[str, set[str]] = defaultdict(set)
    if job_ids:
        for t, s in TestCase.objects.filter(job_id__in=job_ids, test_id__in=tests).values_list("test_id", "status"):
            found[t].add(s)
        wanted = set(tests)
        for names in JobResult.objects.filter(pk__in=job_ids).values_list("failed_tests", flat=True):
            for name in set(names or ()) & wanted:
                found[name].add("failed")
    return found


def _callback_named(job: JobResult) -> list[str]:
    return [name for name in job.failed_tests or () if isinstance(name, str)] if job.outcome == "test" else []


def baseline_status(statuses: set[str]) -> str:
    if statuses & set(verdicts.FAILING):
        return "failing"
    return "passed" if verdicts.PASSED in statuses else "absent"


def baseline_history(backend_id: int, tests: list[str]) -> dict[str, list[dict]]:
    """Each test's last HISTORY results on the backend, newest first."""
    newest = [F("report__received_at").desc(), F("report_id").desc(), F("id").desc()]
    rows = (
        TestCase.objects.filter(Q(job__backend_id=backend_id), test_id__in=tests, status__in=verdicts.COUNTED)
        .filter(job__event_type__in=BASELINE_EVENTS)
        .annotate(job_sha=F("job__job_sha"), n=Window(RowNumber(), partition_by=[F("test_id")], order_by=newest))
        .filter(n__lte=verdicts.HISTORY)
        .order_by("test_id", *newest)
    )
    found: dict[str, list[dict]] = defaultdict(list)
    for r in rows.values("test_id", "status", "reruns", "job_sha"):
        found[r["test_id"]].append(r)
    return found


# --- what a verdict decides: a check run's conclusion, its text, an exoneration, an automatic re-run ----------------
# A check run is never concluded ``failure`` and corrected later: merge bots read a conclusion at once. So a failed
# job's L3/L4 check run waits for its verdict (its test report, else its log's classification; at most
# VERDICT_WAIT_SECONDS after the completion), and concludes neutral when every failure is exonerable (recorded).


@dataclass(frozen=True)
class Decision:
    """A completed job's check-run conclusion ("" while its verdict is awaited), and why."""

    conclusion: str
    found: JobVerdict | None = None
    exonerated: str = ""  # the rule it was exonerated by
    refused: str = ""  # why it was not, when it failed
    wait_until: datetime | None = None


def job_verdict(job: JobResult) -> JobVerdict | None:
    """The failed job's verdict, stored on the job (``JobResult.verdict``; blank for a job that did not fail)."""
    found = jobs_verdicts([job]).get(job.pk)
    verdict = found.verdict if found else ""
    if verdict != job.verdict:
        JobResult.objects.filter(pk=job.pk).update(verdict=verdict)
        job.verdict = verdict
    return found


def verdict_deadline(job: JobResult) -> datetime:
    return (job.completed_at or job.updated_at or timezone.now()) + timedelta(seconds=settings.VERDICT_WAIT_SECONDS)


def verdict_ready(job: JobResult, *, now: datetime | None = None) -> bool:
    """Whether what decides a failed job's verdict is in: its report (parsed, or refused), or — for a failed job
    without failed tests — its log's classification (a class other than test needs no per-test data). Else it is
    awaited until VERDICT_WAIT_SECONDS after the completion, then decided as known (a callback's failed-test names)."""
    if job.outcome not in FAILED or job.relay_decided:
        return True
    if TestReport.objects.filter(job=job).exclude(state=TestReport.State.PENDING).exists():
        return True
    failure = JobFailure.objects.filter(job=job).values_list("failure_class", flat=True).first()
    if not job.failed_tests and failure and failure != "test":
        return True
    return (now or timezone.now()) >= verdict_deadline(job)


def check_run_decision(job: JobResult, *, conclusion: str, now: datetime | None = None) -> Decision:
    """The check run's conclusion for a completed job: ``conclusion`` (the job's, as GitHub takes it), ``neutral``
    for a cancelled job or an exonerated failure, "" while the verdict is awaited."""
    if job.conclusion == "cancelled":
        return Decision("neutral", exonerated="cancelled: a superseded or stopped run never blocks")
    if job.outcome not in FAILED or job.relay_decided:  # the relay timed it out: nothing known to clear it
        return Decision(conclusion)
    if not verdict_ready(job, now=now):
        return Decision("", wait_until=verdict_deadline(job))
    found = job_verdict(job)
    if found is None:
        return Decision(conclusion)
    if not job.backend.exonerates:
        return Decision(conclusion, found, refused=f"exoneration is off for {job.backend.repo}")
    failure = JobFailure.objects.filter(job=job).values("failure_class", "line", "line_number").first() or {}
    age = None
    if found.baseline_finished_at:
        age = ((now or timezone.now()) - found.baseline_finished_at).total_seconds() / 86400
    refused = verdicts.exoneration_refused(
        found.verdict,
        failing=found.failing,
        counted=found.counted,
        failure_class=failure.get("failure_class", ""),
        failure_line=failure.get("line", ""),
        baseline_age_days=age,
        broken_baseline=any(t.verdict == verdicts.BROKEN for t in found.tests),
    )
    if refused:
        return Decision(conclusion, found, refused=refused)
    rule = f"every failure is {', '.join(sorted({t.verdict for t in found.tests} or {found.verdict}))}"
    exoneration_record(job, found, rule, failure)
    return Decision("neutral", found, exonerated=rule)


def exoneration_record(job: JobResult, found: JobVerdict, rule: str, failure: dict) -> None:
    tests = [{"test_id": t.test_id, "verdict": t.verdict, "evidence": list(t.evidence)} for t in found.tests[:50]]
    evidence = {
        "baseline": {"rule": found.baseline_rule, "sha": found.baseline_sha, "jobs": list(found.baseline_jobs)},
        "failure_line": failure.get("line", ""),
        "failure_class": failure.get("failure_class", ""),
    }
    Exoneration.objects.update_or_create(
        job=job,
        defaults={
            "backend_id": job.backend_id,
            "verdict": found.verdict,
            "rule": rule[:300],
            "tests": tests,
            "evidence": evidence,
        },
    )


def verdict_text(decision: Decision) -> str:
    """The check run's verdict section: the job's verdict, whether it blocks, and its failures by verdict."""
    found = decision.found
    if decision.conclusion == "" and decision.wait_until:
        return "**Verdict: awaited** — its test report or log classification is not in yet."
    if found is None:
        return f"**Exonerated** — {decision.exonerated}." if decision.exonerated else ""
    head = f"**Verdict: {found.verdict}** — {verdicts.MEANING[found.verdict]}."
    if decision.exonerated:
        head += f" Exonerated ({decision.exonerated}): this check does not block."
    elif decision.refused:
        head += f" Not exonerated: {decision.refused}."
    lines = [head]
    if found.baseline_sha:
        lines.append(f"Baseline: `{found.baseline_sha[:12]}` ({RULES[found.baseline_rule]}).")
    by_verdict: dict[str, list[TestVerdict]] = {}
    for t in found.tests:
        by_verdict.setdefault(t.verdict, []).append(t)
    for verdict in verdicts.JOB_ORDER:
        tests = by_verdict.get(verdict, [])
        if not tests:
            continue
        lines += ["", f"**{verdict}** ({len(tests)})"]
        for t in tests[:TESTS_LISTED]:
            why = f" — {', '.join(t.evidence)}" if t.evidence else ""
            name = t.test_id.replace("`", "'")
            lines.append(f"- `{name}`{why}")
    return "\n".join(lines)


def infra_retry_due(job: JobResult, found: JobVerdict) -> bool:
    """Whether an automatic re-run is due (``relay.reports.verdicts``): an L3/L4 pull-request job of GitHub Actions
    whose verdict is infra, not re-run automatically before."""
    return (
        found.verdict == verdicts.INFRA
        and job.event_type == Event.PULL_REQUEST
        and job.backend.level in levels.with_check_runs()
        and job.auto_retry_at is None
        and not job.auto_retry_note
        and bool(GITHUB_RUN_ID.match(job.run_id))
    )
