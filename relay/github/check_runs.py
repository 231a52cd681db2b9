"""Upstream check runs of L3 (labelled) and L4 backends' jobs (DESIGN §4), synced by the task worker.

One upstream check run shows one job attempt: created once, then PATCHed as the attempt moves on (repeated
or concurrent syncs never create a second one). A new attempt of the job (a re-run) gets a new check run of
the same name, which supersedes the old one on the PR: GitHub does not let a completed check run go back to
in_progress or change its conclusion.

A sync claims its job with a conditional UPDATE (``JobResult.check_run_claimed_at``), calls GitHub outside any
transaction, records the outcome after, and syncs again if the job moved on meanwhile: no transaction or lock is
held across a GitHub call, and two syncs of one job never run at once.
"""

import logging
import re
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django_q.models import Schedule
from django_q.tasks import async_task, schedule

from ootci import baseline, levels
from ootci.jobs import job_label
from ootci.models import Backend, Delivery, Event, JobFailure, JobResult, PullRequest
from ootci.replication import job_results_changed
from relay.endpoints.intake import delivery_done
from relay.github import client as github

logger = logging.getLogger(__name__)

CHECK_RUN_NAME_PREFIX = "oot"
# external_id = "oot:<backend id>:<downstream run id>": the re-run handler reads the backend and the run from
# it, and never parses the check run's name (device and job names may contain "/").
EXTERNAL_ID = re.compile(r"^oot:(?P<backend>[0-9]{1,18}):(?P<run_id>[^\s]{1,100})$")
CHECK_RUN_MAX_ATTEMPTS = 8  # tries of one sync (or re-run request) when GitHub fails in a way worth retrying
CHECK_RUN_RETRY_MAX_SECONDS = 600.0
CHECK_RUN_TESTS_LISTED = 50  # failed tests listed in a check run's text; the HUD's job page has them all
CHECK_RUN_OUTPUT_LIMIT = 60_000  # characters; GitHub refuses a summary or text over 65,535
# The conclusions an App may set (GitHub alone sets "stale"); anything else is shown as neutral.
CHECK_RUN_CONCLUSIONS = frozenset(
    {"success", "failure", "neutral", "cancelled", "skipped", "timed_out", "action_required"}
)
# How often one sync goes again because its job changed while GitHub was being called.
SYNC_ROUNDS = 3
SWEEP_BATCH = 500


def check_run_name(*, job: JobResult) -> str:
    """``oot/<device, else the repo name>/<workflow>/<job>``."""
    parts = [CHECK_RUN_NAME_PREFIX, job.backend.check_run_prefix, job.workflow_name, job.job_name]
    return "/".join(part for part in parts if part)


def check_run_external_id(*, backend_id: int, run_id: str) -> str:
    return f"{CHECK_RUN_NAME_PREFIX}:{backend_id}:{run_id}"


def check_run_wanted(*, job: JobResult, pr: PullRequest | None) -> bool:
    """Whether a check run may be created for ``job``: a dispatched PR job on an open PR whose stored labels
    (never the ones echoed by the callback, which are as old as the dispatch) select its backend."""
    return (
        pr is not None
        and pr.wants_check_runs
        and job.event_type == Event.PULL_REQUEST
        and job.dispatch_id is not None
        and bool(job.head_sha)
        and levels.wants_check_run(job.backend.level, job.backend.device, pr.labels)
    )


def check_run_fields(*, job: JobResult) -> dict[str, Any]:
    """What the check run of a job attempt says (DESIGN §4), as keyword arguments of ``github.check_run_*``."""
    decision = None
    if job.status == JobResult.Status.COMPLETED:  # a failed job's conclusion waits for its verdict (relay.reports)
        decision = baseline.check_run_decision(job, conclusion=_check_run_conclusion(job))
    fields: dict[str, Any] = {
        "status": JobResult.Status.IN_PROGRESS if decision and not decision.conclusion else job.status,
        "external_id": check_run_external_id(backend_id=job.backend_id, run_id=job.run_id),
        "output": _check_run_output(job, decision),
    }
    if job.run_url:
        fields["details_url"] = job.run_url
    if job.started_at:
        fields["started_at"] = job.started_at
    if decision and decision.conclusion:
        fields["conclusion"] = decision.conclusion
        fields["completed_at"] = job.completed_at or timezone.now()
    elif decision:
        wait = (decision.wait_until - timezone.now()).total_seconds()
        transaction.on_commit(lambda: _check_run_again(job.pk, 1, wait=max(1.0, wait)), robust=True)
    if decision and decision.found and baseline.infra_retry_due(job, decision.found):  # relay.reports.verdicts
        transaction.on_commit(lambda: async_task("relay.tasks.job_infra_retry", job.pk), robust=True)
    return fields


def check_run_sync(*, job_id: int, attempt: int = 1) -> str:
    """Bring the upstream check run of one job attempt in line with the row; safe to run twice or concurrently.

    A row with a check run id gets a PATCH. A row without one gets a check run created when it is the
    latest attempt of its job and the check run is wanted (``check_run_wanted``); an older attempt is
    superseded and left alone. While another sync holds the job's claim this one tries again later (that one
    re-reads the row when it is done; the retry covers a holder that died). A failure worth retrying schedules
    this task again with backoff; GitHub's answer never reaches the callback that enqueued it. Returns what happened.
    """
    claim = _check_run_claim(job_id)
    if claim is None:
        _check_run_again(job_id, attempt, wait=_claim_seconds())
        return "busy"
    try:
        outcome = "skipped"
        for _ in range(SYNC_ROUNDS):
            job = JobResult.objects.select_related("backend").filter(pk=job_id).first()
            if job is None or job.event_type != Event.PULL_REQUEST or not job.head_sha:
                return outcome
            seen = job.updated_at
            try:
                if job.upstream_check_run_id is not None:
                    outcome = _check_run_update(job)
                else:
                    outcome = _check_run_create(job, attempt)
            except github.GitHubError as e:
                return _check_run_retry(job, e, attempt)
            moved = JobResult.objects.filter(pk=job_id).exclude(updated_at__in=[seen, job.updated_at]).exists()
            if not moved:
                return outcome
            _check_run_claim(job_id, renew=claim)  # the job moved on while GitHub was called: sync it again
        return outcome
    finally:
        JobResult.objects.filter(pk=job_id, check_run_claimed_at=claim).update(check_run_claimed_at=None)


def check_run_after_report(*, job: JobResult, pull_request_id: int | None) -> None:
    """Queue the sync of a job's check run after a report changed it, when it has one or one is wanted (the PR is
    read only for a backend at a level with check runs)."""
    if job.upstream_check_run_id is None:
        if job.backend.level not in levels.with_check_runs() or pull_request_id is None:
            return
        if not check_run_wanted(job=job, pr=PullRequest.objects.filter(pk=pull_request_id).first()):
            return
    _check_runs_enqueue([job.pk])


def check_runs_after_sweep(job_ids: list[int]) -> None:
    """Queue the sync of the check runs of jobs the sweeper timed out: completed as timed_out, or created so."""
    for start in range(0, len(job_ids), SWEEP_BATCH):
        ids = JobResult.objects.filter(
            Q(backend__level__in=levels.with_check_runs()) | Q(upstream_check_run_id__isnull=False),
            pk__in=job_ids[start : start + SWEEP_BATCH],
            event_type=Event.PULL_REQUEST,
            dispatch__isnull=False,
        ).values_list("pk", flat=True)
        _check_runs_enqueue(list(ids))


def pull_request_check_runs_backfill(*, delivery_pk: int) -> int:
    """The effect of a ``labeled`` delivery that selected an L3 backend: queue check runs for the jobs that reported
    on the PR's head before the label, the latest attempt of each job, in progress or completed, from the stored
    results (nothing re-runs). Safe to run twice: jobs that have a check run are left out."""
    delivery = Delivery.objects.select_related("pull_request").filter(pk=delivery_pk).first()
    pr = delivery.pull_request if delivery else None
    due: list[int] = []
    if pr is not None and pr.wants_check_runs and pr.head_sha:
        backends = [
            pk
            for pk, level, device in Backend.objects.values_list("pk", "level", "device")
            if levels.wants_check_run(level, device, pr.labels)
        ]
        attempts = (
            JobResult.objects.filter(
                upstream_repo=pr.upstream_repo,
                pr_number=pr.number,
                head_sha=pr.head_sha,
                event_type=Event.PULL_REQUEST,
                backend_id__in=backends,
                dispatch__isnull=False,
            )
            .order_by(*JobResult.LATEST_ORDER)
            .values_list("pk", "backend_id", "workflow_name", "job_name", "upstream_check_run_id")
        )
        latest: dict[tuple[int, str, str], tuple[int, int | None]] = {}
        for pk, backend_id, workflow_name, job_name, check_run_id in attempts:
            latest.setdefault((backend_id, workflow_name, job_name), (pk, check_run_id))
        due = [pk for pk, check_run_id in latest.values() if check_run_id is None]
        _check_runs_enqueue(due)
    delivery_done(delivery_pk=delivery_pk)
    return len(due)


def _check_runs_enqueue(job_ids: list[int]) -> None:
    # A lost enqueue (broker down) leaves that check run behind the row until the job's next report.
    for pk in job_ids:
        transaction.on_commit(lambda pk=pk: async_task("relay.tasks.check_run_sync", pk, save=False), robust=True)


def _claim_seconds() -> float:
    """How long a claim holds: longer than one round of a sync (three GitHub calls at most) can take."""
    return 4.0 * settings.GITHUB_TIMEOUT_SECONDS


def _check_run_claim(job_id: int, *, renew: datetime | None = None) -> datetime | None:
    """Claim (or renew our claim on) the job's check-run sync; None when another sync holds it. A claim is not data:
    it leaves updated_at (and so replication and the state machine's fence) alone."""
    now = timezone.now()
    rows = JobResult.objects.filter(pk=job_id)
    if renew is not None:
        rows = rows.filter(check_run_claimed_at=renew)
    else:
        free = Q(check_run_claimed_at__isnull=True) | Q(
            check_run_claimed_at__lt=now - timedelta(seconds=_claim_seconds())
        )
        rows = rows.filter(free)
    return now if rows.update(check_run_claimed_at=now) else None


def _check_run_create(job: JobResult, attempt: int) -> str:
    if _job_superseded(job):
        return "superseded"
    pr = PullRequest.objects.filter(upstream_repo=job.upstream_repo, number=job.pr_number).first()
    if not check_run_wanted(job=job, pr=pr):
        return "unwanted"
    name = check_run_name(job=job)
    fields = check_run_fields(job=job)
    found = None
    if attempt > 1:
        # The failed try may have created it after all (a 502 after GitHub's write): find it rather than add a twin.
        found = github.check_run_find(repo=job.upstream_repo, head_sha=job.head_sha, name=name)
        if found is not None and JobResult.objects.filter(upstream_check_run_id=found).exclude(pk=job.pk).exists():
            found = None  # an earlier attempt's check run, which this attempt supersedes
    if found is None:
        check_run_id = github.check_run_create(
            repo=job.upstream_repo, fields={"name": name, "head_sha": job.head_sha, **fields}
        )
    else:
        github.check_run_update(repo=job.upstream_repo, check_run_id=found, fields=fields)
        check_run_id = found
    _job_check_run_store(job, check_run_id)
    logger.info("check run %s %s for %s on %s", check_run_id, name, job_label(job.attempt_key), job.head_sha)
    return "created"


def _check_run_update(job: JobResult) -> str:
    fields = check_run_fields(job=job)
    try:
        github.check_run_update(repo=job.upstream_repo, check_run_id=job.upstream_check_run_id, fields=fields)
    except github.GitHubError as e:
        # A genuine completion after the relay's timed_out: GitHub keeps a completed check run's conclusion,
        # so the attempt's verdict goes on a new check run of the same name, which supersedes it.
        if e.status != 422 or job.status != JobResult.Status.COMPLETED or _job_superseded(job):
            raise
        name = check_run_name(job=job)
        check_run_id = github.check_run_create(
            repo=job.upstream_repo, fields={"name": name, "head_sha": job.head_sha, **fields}
        )
        _job_check_run_store(job, check_run_id, replace=True)
        logger.info(
            "check run %s %s replaces %s for %s",
            check_run_id,
            name,
            job.upstream_check_run_id,
            job_label(job.attempt_key),
        )
        return "replaced"
    return "updated"


def _job_check_run_store(job: JobResult, check_run_id: int, *, replace: bool = False) -> None:
    rows = JobResult.objects.filter(pk=job.pk)
    if not replace:
        rows = rows.filter(upstream_check_run_id__isnull=True)
    now = timezone.now()  # by hand: update() skips auto_now, and replication follows updated_at
    if rows.update(upstream_check_run_id=check_run_id, updated_at=now):
        job.upstream_check_run_id, job.updated_at = check_run_id, now
        job_results_changed()


def _job_superseded(job: JobResult) -> bool:
    """Whether a later attempt of the same job has reported (the HUD shows that one)."""
    return job.attempts().values_list("pk", flat=True).first() != job.pk


def _check_run_retry(job: JobResult, error: github.GitHubError, attempt: int) -> str:
    if not error.retryable or attempt >= CHECK_RUN_MAX_ATTEMPTS:
        logger.warning("check run of %s: giving up after try %d: %s", job_label(job.attempt_key), attempt, error)
        return "failed"
    wait = github_retry_wait(error, attempt)
    _check_run_again(job.pk, attempt + 1, wait=wait)
    logger.info(
        "check run of %s: try %d failed (%s); again in %.0f s", job_label(job.attempt_key), attempt, error, wait
    )
    return "retrying"


def _check_run_again(job_id: int, attempt: int, *, wait: float) -> None:
    schedule(
        "relay.tasks.check_run_sync",
        job_id,
        attempt,
        schedule_type=Schedule.ONCE,
        next_run=timezone.now() + timedelta(seconds=wait),
    )


def github_retry_wait(error: github.GitHubError | None, attempt: int) -> float:
    if isinstance(error, github.RateLimited):
        return error.wait_seconds
    # A schedule rather than a sleep: the worker is free meanwhile, and a GitHub outage of minutes is ridden out.
    return min(CHECK_RUN_RETRY_MAX_SECONDS, settings.DISPATCH_RETRY_BASE_SECONDS * 4 ** (attempt - 1))


def _check_run_conclusion(job: JobResult) -> str:
    return job.conclusion if job.conclusion in CHECK_RUN_CONCLUSIONS else "neutral"


def _check_run_output(job: JobResult, decision: baseline.Decision | None = None) -> dict[str, str]:
    if decision and decision.conclusion:
        title = decision.conclusion.replace("_", " ").capitalize()
        title += f" ({decision.found.verdict})" if decision.found else ""
    else:
        title = "Completed: verdict awaited" if decision else "In progress"
    run = f"run {job.run_id}" + (f", attempt {job.run_attempt}" if job.run_attempt > 1 else "")
    lines = [
        f"**{job.backend.repo}** · workflow `{job.workflow_name}`"
        + (f" · job `{job.job_name}`" if job.job_name else "")
        + " · "
        + (f"[{run}]({job.run_url})" if job.run_url else run)
    ]
    counts = [(name, getattr(job, name)) for name in ("passed", "failed", "skipped")]
    if any(value is not None for _, value in counts):
        lines += [
            "",
            "| passed | failed | skipped |",
            "|---:|---:|---:|",
            "| " + " | ".join("—" if value is None else str(value) for _, value in counts) + " |",
        ]
    timings = [
        f"{label}: {_duration_text(value)}"
        for label, value in (
            ("Workflow queue time", job.queue_time),
            ("Waiting for dependencies", job.dependency_wait),
            ("Execution time", job.execution_time),
        )
        if value is not None
    ]
    if timings:
        lines += ["", " · ".join(timings)]
    if job.relay_decided:
        lines += ["", f"No completion was reported within {settings.ZOMBIE_TIMEOUT_HOURS:g} h: OOT CI timed it out."]
    if job.artifact_url:
        lines += ["", f"[Test artifacts]({job.artifact_url})"]
    failure = JobFailure.objects.filter(job_id=job.pk).exclude(failure_class="").first()
    if failure:
        lines += ["", _failure_text(failure)]
    if decision and (text := baseline.verdict_text(decision)):
        lines += ["", text]
    output = {"title": title, "summary": "\n".join(lines)[:CHECK_RUN_OUTPUT_LIMIT]}
    if job.failed_tests:
        output["text"] = _check_run_failed_tests_text(job)
    return output


def _failure_text(failure: JobFailure) -> str:
    """The classifier's verdict (relay.reports.logs): the class, what decided it and the failure line, linked."""
    why = failure.get_source_display() + (f" `{failure.rule_name}`" if failure.rule_name else "")
    text = f"**Failure class: {failure.failure_class}** ({why})"
    if failure.line:
        line = failure.line[:300].replace("`", "'")
        where = f"line {failure.line_number}"
        where = f"[{where}]({failure.line_url})" if failure.line_url else where
        text += f"\n\n{where}: `{line}`"
    return text


def _check_run_failed_tests_text(job: JobResult) -> str:
    shown = job.failed_tests[:CHECK_RUN_TESTS_LISTED]
    total = max(len(job.failed_tests), job.failed or 0)
    heading = f"### Failed tests ({len(shown)} of {total})" if total > len(shown) else "### Failed tests"
    lines = [heading, ""] + ["- `" + name.replace("`", "'") + "`" for name in shown]
    if total > len(shown):
        lines += ["", f"… and {total - len(shown)} more: see the downstream run."]
    text = "\n".join(lines)
    return text if len(text) <= CHECK_RUN_OUTPUT_LIMIT else text[: CHECK_RUN_OUTPUT_LIMIT - 1] + "…"


def _duration_text(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
