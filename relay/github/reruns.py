"""Re-runs: the "Re-run" buttons of our check runs on the PR re-run the failed jobs of the downstream runs.

A ``check_run``/``check_suite`` ``rerequested`` delivery of our App is stored as a pending Delivery of the PR (so the
PR page can show who asked and when); the task that carries it out asks GitHub to re-run the failed jobs of each
distinct downstream run, and retries later when GitHub fails in a way worth retrying.
"""

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django_q.models import Schedule
from django_q.tasks import schedule

from ootci import levels
from ootci.models import Backend, Delivery, Event, JobResult, PullRequest
from relay.endpoints.intake import delivery_done, delivery_effect_enqueue
from relay.github import client as github
from relay.github.check_runs import CHECK_RUN_MAX_ATTEMPTS, EXTERNAL_ID, github_retry_wait

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RerunTarget:
    backend: Backend
    run_id: str


@dataclass(frozen=True)
class RerunAccepted:
    delivery_id: str
    queued: bool
    reason: str = ""  # why nothing was queued


def rerun_request_accept(*, delivery_id: str, event: str, payload: dict[str, Any]) -> RerunAccepted:
    """Record a "Re-run" click on one of our check runs (``check_run``) or on our suite (``check_suite``) as a
    Delivery of the PR, and queue the re-run. Another App's check run, or one that is not a job of an L3/L4
    backend, is ignored and nothing is stored."""
    subject = payload.get(event)
    if not isinstance(subject, dict):
        return RerunAccepted(delivery_id, False, f"the payload has no {event}")
    if not settings.GITHUB_APP_ID or _github_app_id(subject) != str(settings.GITHUB_APP_ID):
        return RerunAccepted(delivery_id, False, f"not a {event} of our GitHub App")
    if event == "check_run" and _rerun_target(subject.get("external_id")) is None:
        return RerunAccepted(delivery_id, False, "not a check run of an OOT CI job at L3 or L4")
    if event == "check_suite" and not isinstance(subject.get("id"), int):
        return RerunAccepted(delivery_id, False, "the check_suite has no id")
    head_sha = subject.get("head_sha") if isinstance(subject.get("head_sha"), str) else ""
    upstream = payload["repository"]["full_name"]
    pr = (
        PullRequest.objects.filter(upstream_repo=upstream, head_sha=head_sha).order_by("-updated_at").first()
        if head_sha
        else None
    )
    try:
        with transaction.atomic():
            delivery = Delivery.objects.create(
                delivery_id=delivery_id,
                event=event,
                action=payload.get("action") or "",
                upstream_repo=upstream,
                head_sha=head_sha[:40],
                pull_request=pr,
                payload=payload,
                pending=True,
            )
            delivery_effect_enqueue(delivery)
    except IntegrityError:
        return RerunAccepted(delivery_id, False, "duplicate delivery")
    sender = payload.get("sender")
    sender = (sender.get("login") if isinstance(sender, dict) else None) or "?"
    logger.info("re-run of %s %s requested by %s (PR %s)", event, subject.get("id"), sender, pr and pr.number)
    return RerunAccepted(delivery_id, True)


def rerun_request_handle(*, delivery_pk: int, attempt: int = 1, only: list[list[Any]] | None = None) -> dict[str, int]:
    """Re-run the failed jobs of every distinct downstream run a re-run request names; safe to run twice.

    ``check_run``: the run in its external_id. ``check_suite``: the runs of the suite's check runs, deduplicated
    (a failed workflow run shows as many failed checks). A run already running is not an error. Runs GitHub
    failed on in a way worth retrying (``only``, as [backend id, run id] pairs) are tried again later.
    """
    delivery = Delivery.objects.get(pk=delivery_pk)
    # From here on a retry is this task's own schedule: the pending-delivery schedule need not start it again.
    delivery_done(delivery_pk=delivery_pk)
    subject = delivery.payload.get(delivery.event) or {}
    try:
        targets = _rerun_targets(delivery, subject)
    except github.GitHubError as e:
        return _rerun_retry(delivery, e, attempt, only)
    if only is not None:
        wanted = {(backend_id, str(run_id)) for backend_id, run_id in only}
        targets = [t for t in targets if (t.backend.pk, t.run_id) in wanted]
    outcomes: Counter[str] = Counter()
    again: list[list[Any]] = []
    for target in targets:
        try:
            started = github.workflow_run_rerun_failed_jobs(repo=target.backend.repo, run_id=int(target.run_id))
        except github.GitHubError as e:
            logger.warning("re-run of %s run %s failed: %s", target.backend.repo, target.run_id, e)
            if e.retryable:
                again.append([target.backend.pk, target.run_id])
            outcomes["failed"] += 1
            continue
        outcomes["rerun" if started else "already_running"] += 1
        logger.info("re-run of %s run %s: %s", target.backend.repo, target.run_id, "started" if started else "running")
    if again:
        outcomes["retrying"] = len(again)
        _rerun_retry(delivery, None, attempt, again)
    return dict(outcomes)


def _rerun_retry(
    delivery: Delivery, error: github.GitHubError | None, attempt: int, only: list[list[Any]] | None
) -> dict[str, int]:
    if (error is not None and not error.retryable) or attempt >= CHECK_RUN_MAX_ATTEMPTS:
        logger.warning("re-run request %s: giving up after try %d: %s", delivery.delivery_id, attempt, error)
        return {"failed": 1}
    wait = github_retry_wait(error, attempt)
    schedule(
        "relay.tasks.rerun_request",
        delivery.pk,
        attempt + 1,
        only,
        schedule_type=Schedule.ONCE,
        next_run=timezone.now() + timedelta(seconds=wait),
    )
    return {"retrying": len(only) if only else 1}


def _rerun_targets(delivery: Delivery, subject: dict[str, Any]) -> list[RerunTarget]:
    if delivery.event == "check_run":
        external_ids = [subject.get("external_id")]
    else:
        runs = github.check_suite_check_runs(repo=delivery.upstream_repo, check_suite_id=int(subject["id"]))
        ours = str(settings.GITHUB_APP_ID)
        external_ids = [run["external_id"] for run in runs if run["app_id"] == ours]
    targets: dict[tuple[int, str], RerunTarget] = {}
    for external_id in dict.fromkeys(external_ids):  # distinct, in order
        target = _rerun_target(external_id)
        if target is not None:
            targets.setdefault((target.backend.pk, target.run_id), target)
    return list(targets.values())


def _rerun_target(external_id: Any) -> RerunTarget | None:
    """The backend and downstream run an external_id of ours names, when that run is a PR job we recorded of a
    backend at a level with check runs; GitHub Actions run ids only (others cannot be re-run through GitHub)."""
    match = EXTERNAL_ID.match(external_id) if isinstance(external_id, str) else None
    if match is None or not match["run_id"].isdigit():
        return None
    backend = Backend.objects.filter(pk=int(match["backend"]), enabled=True, level__in=levels.with_check_runs()).first()
    if backend is None:
        return None
    recorded = JobResult.objects.filter(backend=backend, run_id=match["run_id"], event_type=Event.PULL_REQUEST)
    return RerunTarget(backend, match["run_id"]) if recorded.exists() else None


def _github_app_id(subject: dict[str, Any]) -> str:
    app = subject.get("app")
    return str(app.get("id") or "") if isinstance(app, dict) else ""
