"""Which jobs the failing-tests view reads (``hud.failing_tests``): a backend's jobs on a PR's head or in its latest
nightly/push run, their baseline run, and the other backends' jobs at the same upstream SHA.

These are a few indexed JobResult rows, read from the database (the system of record) whichever store holds the
test cases; a job's result is its latest attempt (``JobResult.LATEST_ORDER``, as everywhere in the HUD).
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db.models import Exists, OuterRef, Q

from hud.failing_tests import BASELINE_EVENTS, BackendFailing, Baseline, CaseStore, Run, RunJob, Target, classified
from hud.store import latest_attempts
from hud.types import BackendInfo
from ootci.models import Delivery, JobResult, PullRequest, TestReport

FIELDS = ("id", "backend_id", "event_type", "job_sha", "pr_number", "workflow_name", "job_name", "run_attempt")
FIELDS += ("created_at", "finished_at", "outcome", "run_url")
RECENT_PRS = 10


def job_rows(jobs) -> list[dict]:
    """Rows of ``jobs``, newest attempt first."""
    return list(jobs.order_by(*JobResult.LATEST_ORDER).values(*FIELDS))


def run_of(rows: list[dict]) -> Run | None:
    """The run of one backend's rows at one SHA and event (given newest first)."""
    if not rows:
        return None
    latest = latest_attempts(rows)
    latest.sort(key=lambda r: (r["workflow_name"], r["job_name"], r["id"]))
    first = rows[0]
    return Run(
        backend_id=first["backend_id"],
        event=first["event_type"],
        sha=first["job_sha"],
        pr_number=first["pr_number"],
        jobs=tuple(RunJob(r["id"], column(r), r["outcome"], r["run_url"]) for r in latest),
        attempts=tuple(sorted(r["id"] for r in rows)),
        finished_at=max(r["finished_at"] for r in latest),
    )


def column(row: dict) -> str:
    return f"{row['workflow_name']} / {row['job_name']}"


def baseline_jobs(backend_id: int):
    """The backend's nightly and push jobs that have a parsed test report."""
    parsed = TestReport.objects.filter(job=OuterRef("pk"), state=TestReport.State.PARSED)
    return JobResult.objects.filter(backend_id=backend_id, event_type__in=BASELINE_EVENTS).filter(Exists(parsed))


def run_at(backend_id: int, event: str, sha: str) -> Run | None:
    return run_of(job_rows(JobResult.objects.filter(backend_id=backend_id, event_type=event, job_sha=sha)))


def pick(jobs) -> Run | None:
    """The run of the newest job of ``jobs`` (by finish time)."""
    hit = jobs.order_by("-finished_at", "-id").values("backend_id", "event_type", "job_sha").first()
    return run_at(hit["backend_id"], hit["event_type"], hit["job_sha"]) if hit else None


def pr_baseline(backend_id: int, *, base_sha: str, pushed_at: datetime | None) -> Baseline | None:
    """The run on the PR's base commit, else the latest finished before the head was pushed, else none."""
    jobs = baseline_jobs(backend_id)
    if base_sha and (run := pick(jobs.filter(job_sha=base_sha))):
        return Baseline("base", run)
    if pushed_at and (run := pick(jobs.filter(finished_at__lte=pushed_at))):
        return Baseline("before", run)
    return None


def others_at(sha: str, *, backend_id: int, events: tuple[str, ...]) -> dict[int, int]:
    """The other backends' latest attempts at ``sha`` (of ``events``): job id → backend id."""
    rows = job_rows(JobResult.objects.filter(job_sha=sha, event_type__in=events).exclude(backend_id=backend_id))
    return {r["id"]: r["backend_id"] for r in latest_attempts(rows)}


def pr_head(number: int) -> tuple[str, str, datetime | None] | None:
    """The PR's head SHA, its base SHA ("" if unknown) and when that head was first pushed; None if never relayed."""
    pr = PullRequest.objects.filter(upstream_repo=settings.UPSTREAM_REPO, number=number).first()
    newest = JobResult.objects.filter(pr_number=number, event_type="pull_request").order_by(*JobResult.LATEST_ORDER)
    head = pr.head_sha if pr and pr.head_sha else newest.values_list("job_sha", flat=True).first()
    if not head:
        return None
    deliveries = Delivery.objects.filter(pull_request__number=number, head_sha=head).order_by("received_at")
    base = next((sha for sha in deliveries.values_list("payload__pull_request__base__sha", flat=True) if sha), "")
    pushed = deliveries.values_list("received_at", flat=True).first()
    if pushed is None:
        pushed = newest.filter(job_sha=head).order_by("created_at").values_list("created_at", flat=True).first()
    return head, str(base)[:40], pushed


def pr_targets(number: int, backends: list[BackendInfo]) -> list[Target] | None:
    """One target per backend of ``backends`` on the PR's head SHA; None if the PR was never relayed."""
    found = pr_head(number)
    if found is None:
        return None
    head, base, pushed = found
    rows = job_rows(JobResult.objects.filter(pr_number=number, event_type="pull_request", job_sha=head))
    latest = {r["id"]: r["backend_id"] for r in latest_attempts(rows)}
    targets = []
    for b in backends:
        run = run_of([r for r in rows if r["backend_id"] == b.id])
        others = {job: bid for job, bid in latest.items() if bid != b.id}
        baseline = pr_baseline(b.id, base_sha=base, pushed_at=pushed) if run else None
        targets.append(Target(b, run, baseline, others, pr_number=number, sha=head))
    return targets


def latest_baseline_target(backend: BackendInfo) -> Target:
    """The backend's latest nightly or push run with a test report, compared with the run before it."""
    jobs = baseline_jobs(backend.id)
    run = pick(jobs)
    if run is None:
        return Target(backend, None, None)
    started = min(r["created_at"] for r in job_rows(JobResult.objects.filter(id__in=[j.id for j in run.jobs])))
    before = pick(jobs.filter(finished_at__lte=started).filter(~Q(job_sha=run.sha)))
    baseline = Baseline("previous", before) if before else None
    return Target(backend, run, baseline, others_at(run.sha, backend_id=backend.id, events=BASELINE_EVENTS))


def recent_prs(backend_id: int) -> list[dict]:
    """The backend's latest PR heads with a test failure (PR number, SHA, finish time), newest first."""
    rows = JobResult.objects.filter(backend_id=backend_id, event_type="pull_request", outcome="test")
    found: dict[int, dict] = {}
    for r in rows.order_by("-finished_at").values("pr_number", "job_sha", "finished_at")[:200]:
        if r["pr_number"] and len(found) < RECENT_PRS:
            found.setdefault(r["pr_number"], r)
    return list(found.values())


# --- the entry points (hud.queries) ----------------------------------------------------------------------------------


def pr_failing(store: CaseStore, number: int, backends: list[BackendInfo]) -> list[BackendFailing] | None:
    """Each backend's failing tests on the PR's head, classified; None if the PR was never relayed."""
    targets = pr_targets(number, backends)
    return None if targets is None else classified(store, targets)


def backend_failing(store: CaseStore, backend: BackendInfo, *, pr: int | None = None) -> BackendFailing | None:
    """The backend's failing tests on PR ``pr``'s head (None if that PR was never relayed), else in its latest
    nightly or push run with a test report."""
    if pr is None:
        return classified(store, [latest_baseline_target(backend)])[0]
    targets = pr_targets(pr, [backend])
    return None if targets is None else classified(store, targets)[0]
