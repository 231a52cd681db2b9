"""The failing-tests views' reads (pages and JSON API): each backend's failing tests classified
(``hud.failing.classes``) on a PR's head or in its latest baseline, and each failed job's failure line
(``hud.failing.lines``).

Which jobs are read: a backend's jobs on a PR's head or in its latest nightly/push run, their baseline run, and the
other backends' jobs at the same upstream SHA.

These are a few indexed JobResult rows, read from the database (the system of record) whichever store holds the
test cases; a job's result is its latest attempt (``JobResult.LATEST_ORDER``, as everywhere in the HUD).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Max, Min, Q

from hud.failing import lines
from hud.failing.classes import (
    BackendFailing,
    Baseline,
    Run,
    RunJob,
    Target,
    by_job,
    chosen_tests,
    classified,
)
from hud.stores import allowlisted, softcache
from hud.stores.base import CaseRows, latest_attempts, since
from hud.stores.db.failing import DatabaseCases
from hud.stores.types import BackendInfo, PrDetail
from ootci import baseline, verdicts
from ootci.baseline import BASELINE_EVENTS
from ootci.models import DisabledTest, JobResult, PullRequest, TestReport

FIELDS = ("id", "backend_id", "event_type", "job_sha", "pr_number", "workflow_name", "job_name", "run_attempt")
FIELDS += ("created_at", "finished_at", "outcome", "run_url", "failure_class")
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
        jobs=tuple(RunJob(r["id"], column(r), r["outcome"], r["run_url"], r["failure_class"]) for r in latest),
        attempts=tuple(sorted(r["id"] for r in rows)),
        finished_at=max(r["finished_at"] for r in latest),
    )


def column(row: dict) -> str:
    return f"{row['workflow_name']} / {row['job_name']}"


def runs_at(keys: dict[int, tuple[str, str]]) -> dict[int, Run]:
    """Each backend's run at its (event, SHA): one query for any number."""
    if not keys:
        return {}
    wanted = Q()
    for bid, (event, sha) in keys.items():
        wanted |= Q(backend_id=bid, event_type=event, job_sha=sha)
    rows = job_rows(JobResult.objects.filter(wanted))
    return {bid: run_of([r for r in rows if r["backend_id"] == bid]) for bid in keys}


def pr_baselines(backend_ids: list[int], *, base_sha: str, pushed_at: datetime | None) -> dict[int, Baseline]:
    """Per backend, its baseline run for the PR (``ootci.baseline``: the one rule)."""
    found = baseline.pr_baselines(backend_ids, base_sha=base_sha, pushed_at=pushed_at)
    runs = runs_at({bid: key for bid, (_, key) in found.items()})
    return {bid: Baseline(found[bid][0], run) for bid, run in runs.items()}


def disabled_of(targets: list[Target], failing: dict[int, list[dict]]) -> list[Target]:
    """The targets with the failing tests their backend's disabled list holds (one query for all)."""
    wanted = {t.backend.id: chosen_tests(t, failing)[0] for t in targets if t.run}
    wanted = {bid: tests for bid, tests in wanted.items() if tests}
    if not wanted:
        return targets
    rows = DisabledTest.objects.active().filter(backend_id__in=list(wanted))
    entries: dict[int, list[tuple]] = {bid: [] for bid in wanted}
    for bid, *entry in rows.values_list("backend_id", "name", "kind", "test_name", "class_name"):
        entries[bid].append(tuple(entry))
    return [
        replace(t, disabled=frozenset(verdicts.job_disabled_tests(wanted[t.backend.id], entries[t.backend.id])))
        if t.backend.id in wanted
        else t
        for t in targets
    ]


def others_at(sha: str, *, backend_id: int, events: tuple[str, ...]) -> dict[int, int]:
    """The other backends' latest attempts at ``sha`` (of ``events``): job id → backend id."""
    rows = job_rows(JobResult.objects.filter(job_sha=sha, event_type__in=events).exclude(backend_id=backend_id))
    return {r["id"]: r["backend_id"] for r in latest_attempts(rows)}


def pr_head(number: int) -> str:
    """The PR's head SHA ("" if the PR was never relayed)."""
    pr = PullRequest.objects.filter(upstream_repo=settings.UPSTREAM_REPO, number=number).first()
    if pr and pr.head_sha:
        return pr.head_sha
    newest = JobResult.objects.filter(pr_number=number, event_type="pull_request").order_by(*JobResult.LATEST_ORDER)
    return newest.values_list("job_sha", flat=True).first() or ""


def pr_state(number: int, head: str) -> str:
    """What the PR's head has as results: its job results and their test reports, counted with their latest change
    (a cache key part: it changes when a job result or report of that head is written or parsed again)."""
    jobs = JobResult.objects.filter(pr_number=number, event_type="pull_request", job_sha=head)
    found = jobs.aggregate(n=Count("id"), at=Max("updated_at"))
    reports = TestReport.objects.filter(job__in=jobs.values("id")).aggregate(n=Count("id"), at=Max("parsed_at"))
    return "-".join(f"{x['n']}/{x['at'].timestamp() if x['at'] else 0}" for x in (found, reports))


def pr_targets(number: int, head: str, backends: list[BackendInfo]) -> tuple[list[Target], list[dict]]:
    """One target per backend of ``backends`` on the PR's head SHA (baselines not yet attached), and the job rows."""
    rows = job_rows(JobResult.objects.filter(pr_number=number, event_type="pull_request", job_sha=head))
    latest = {r["id"]: r["backend_id"] for r in latest_attempts(rows)}
    targets = []
    for b in backends:
        run = run_of([r for r in rows if r["backend_id"] == b.id])
        others = {job: bid for job, bid in latest.items() if bid != b.id}
        targets.append(Target(b, run, None, others, pr_number=number, sha=head))
    return targets, rows


def latest_baseline_target(backend: BackendInfo) -> Target:
    """The backend's latest nightly or push run with a test report, compared with the run before it."""
    run = runs_at(baseline.newest_runs(baseline.baseline_jobs([backend.id]))).get(backend.id)
    if run is None:
        return Target(backend, None, None)
    started = JobResult.objects.filter(id__in=[j.id for j in run.jobs]).aggregate(at=Min("created_at"))["at"]
    key = baseline.previous_baseline(backend.id, sha=run.sha, started_at=started)
    before = runs_at({backend.id: key}).get(backend.id) if key else None
    previous = Baseline("previous", before) if before else None
    return Target(backend, run, previous, others_at(run.sha, backend_id=backend.id, events=BASELINE_EVENTS))


def recent_prs(backend_id: int) -> list[dict]:
    """The backend's latest PR heads with a test failure (PR number, SHA, finish time), newest first."""
    rows = JobResult.objects.filter(backend_id=backend_id, event_type="pull_request", outcome="test")
    found: dict[int, dict] = {}
    for r in rows.order_by("-finished_at").values("pr_number", "job_sha", "finished_at")[:200]:
        if r["pr_number"] and len(found) < RECENT_PRS:
            found.setdefault(r["pr_number"], r)
    return list(found.values())


# --- the entry points (hud.figures.queries)
# ----------------------------------------------------------------------------------


def pr_failing(
    store: CaseRows, number: int, backends: list[BackendInfo], *, head: str = ""
) -> list[BackendFailing] | None:
    """Each backend's failing tests on the PR's head (``head``, else the PR's as last seen), classified; None if the
    PR was never relayed. The baselines are looked for only when a backend has a failing test there, so a PR without
    one costs two queries (its jobs, their failing cases)."""
    head = head or pr_head(number)
    if not head:
        return None
    targets, rows = pr_targets(number, head, backends)
    ran = [t for t in targets if t.run]
    failing = by_job(store.failing_cases(job_ids=sorted(j.id for t in ran for j in t.run.jobs)) if ran else [])
    failing_on = [t.backend.id for t in ran if chosen_tests(t, failing)[0]]
    if failing_on:
        first_job_at = min((r["created_at"] for r in rows), default=None)
        base, pushed = baseline.pr_pushed(number, head, first_job_at=first_job_at)
        baselines = pr_baselines(failing_on, base_sha=base, pushed_at=pushed)
        targets = [replace(t, baseline=baselines.get(t.backend.id)) for t in targets]
        targets = disabled_of(targets, failing)
    return classified(store, targets, failing=failing)


def backend_failing(store: CaseRows, backend: BackendInfo, *, pr: int | None = None) -> BackendFailing | None:
    """The backend's failing tests on PR ``pr``'s head (None if that PR was never relayed), else in its latest
    nightly or push run with a test report."""
    if pr is None:
        target = latest_baseline_target(backend)
        failing = by_job(store.failing_cases(job_ids=[j.id for j in target.run.jobs]) if target.run else [])
        return classified(store, disabled_of([target], failing), failing=failing)[0]
    found = pr_failing(store, pr, [backend])
    return None if found is None else found[0]


# --- the views' reads ----------------------------------------------------------------------------------------------


def case_store() -> CaseRows:
    """The test cases the failing-tests view reads: the database's, whichever store the HUD's figures come from. Its
    reads are point reads by job (the (job, status) index) and by (backend, test) (TestRecent, kept at parse time),
    which ClickHouse, sorted by test, would answer by scanning (0.1–0.5 s each on 10 million cases)."""
    return DatabaseCases()


def failing_tests(backend: BackendInfo, *, pr: int | None = None) -> BackendFailing | None:
    """The backend's failing tests, classified (hud.failing.classes), on PR ``pr``'s head or in its latest baseline."""
    return backend_failing(case_store(), backend, pr=pr)


def pr_failing_tests(number: int, detail: PrDetail | None = None) -> list[BackendFailing] | None:
    """Each backend of the PR's page (``detail``, else every shown one) classified on its head; None if unknown.
    Cached (HUD_CACHE_SECONDS) until a job result or test report of that head changes: the page refreshes every
    minute, and a PR that fails on a dozen backends costs a few hundred milliseconds to classify."""
    backends, head = ([g.backend for g in detail.groups], detail.head_sha) if detail else (allowlisted.shown(), "")
    head = head or pr_head(number)
    if not head:
        return None

    def compute() -> list[BackendFailing] | None:
        return pr_failing(case_store(), number, backends, head=head)

    if not settings.HUD_CACHE_SECONDS:
        return compute()
    ids = ",".join(str(b.id) for b in backends)
    return softcache.through_cache("pr_failing", (number, head, ids, pr_state(number, head)), compute)


def recent_failing_prs(backend_id: int) -> list[dict]:
    """The backend's latest PR heads with a test failure, for the failing-tests view's links."""
    return recent_prs(backend_id)


def auto_retries(jobs) -> set[int]:
    """The attempts among ``jobs`` that the relay started itself, re-running an infra failure (hud.failing.lines)."""
    return lines.auto_retries(jobs)


def job_failures(job_ids) -> dict[int, lines.FailureLine]:
    """The failure line and class of each of these jobs that was classified (hud.failing.lines), by job id."""
    return lines.failure_lines(job_ids)


def failure_signatures(*, days: int, now: datetime | None = None) -> list[lines.Signature]:
    """The failures page: failure signatures of the shown backends in the window, most jobs affected first."""
    return lines.signatures(since=since(days, now), backend_ids=[b.id for b in allowlisted.shown()])
