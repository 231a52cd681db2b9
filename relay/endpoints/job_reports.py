"""Job reports from downstream: the callbacks of the public callback action, and the CRCR-compatible ingest.

Both turn a report into a ``ootci.jobs.Report`` for the one state machine (``job_report_apply``); what differs is
who is trusted for what. A callback's caller is the repo its OIDC token names, its report must answer a dispatch
we made to that repo, and PR and SHA come from our Delivery, never from what it echoes. The ingest takes the
reference relay's forwarded reports as they are (``trusted`` was verified by that relay).
"""

import logging
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ootci import jobs
from ootci.jobs import JobConflict, Recorded, Report, job_report_apply
from ootci.models import Backend, CallbackRejection, Dispatch, Event, JobResult
from ootci.rows import related_columns, row_parts, rows_as
from relay.endpoints import ratelimit, sha_check
from relay.endpoints.tokens import callback_token_problem
from relay.github import check_runs
from relay.reports import follow_up_queue, logs

logger = logging.getLogger(__name__)

SELF_REPORT_EVENTS = frozenset({Event.NIGHTLY, Event.PERIODIC})
UPSTREAM_SHA = re.compile(r"^[0-9a-fA-F]{7,40}$")
# Refused callbacks are counted in the database; past this many rows per minute and repo (unverified
# callers share one budget) they are only logged, so that a flood of junk cannot flood the table.
REJECTION_ROWS_PER_MIN = 300
MAX_COUNT = 2**31 - 1
DISPATCH_OF_DELIVERY = """
    SELECT d.id, d.sent_at, d.delivery_id, dl.event, dl.upstream_repo, dl.head_sha, dl.pull_request_id,
           pr.number AS pr_number
    FROM ootci_dispatch d
    JOIN ootci_delivery dl ON dl.id = d.delivery_id
    LEFT JOIN ootci_pullrequest pr ON pr.id = dl.pull_request_id
    WHERE d.backend_id = %s AND dl.delivery_id = %s"""
# What a callback reads before it writes, in one statement (tests/bench/bench_callback.py: a round trip each was a
# tenth of the web's CPU): the caller's backend (b), our dispatch of the delivery to it (d), the job attempt as
# recorded (j), and, for an in_progress, the start of its run's first job (r, ``ootci.jobs.Recorded``). Portable SQL:
# SQLite runs it too.
KNOWN = """
    SELECT {backend}, d.id AS d__id, d.sent_at AS d__sent_at, d.delivery_id AS d__delivery_id, dl.event AS d__event,
           dl.upstream_repo AS d__upstream_repo, dl.head_sha AS d__head_sha, dl.pull_request_id AS d__pull_request_id,
           pr.number AS d__pr_number, {job}{run}
    FROM ootci_backend b
    LEFT JOIN ootci_dispatch d
        ON d.delivery_id = (SELECT x.id FROM ootci_delivery x WHERE x.delivery_id = %s) AND d.backend_id = b.id
    LEFT JOIN ootci_delivery dl ON dl.id = d.delivery_id
    LEFT JOIN ootci_pullrequest pr ON pr.id = dl.pull_request_id
    LEFT JOIN ootci_jobresult j ON j.backend_id = b.id AND j.delivery_id = %s AND j.workflow_name = %s
        AND j.job_name = %s AND j.run_id = %s AND j.run_attempt = %s{run_join}
    WHERE lower(b.repo) = lower(%s)"""
RUN_JOIN = """
    LEFT JOIN ootci_jobresult r ON r.id = (
        SELECT o.id FROM ootci_jobresult o WHERE o.backend_id = b.id AND o.delivery_id = %s AND o.run_id = %s
            AND o.run_attempt = %s AND o.started_at IS NOT NULL ORDER BY o.started_at LIMIT 1)"""
KNOWN_PARTS = {"b": Backend, "d": Dispatch, "j": JobResult}
KNOWN_SQL = {
    in_progress: KNOWN.format(
        backend=", ".join(f"b.{name} AS b__{name}" for name in Backend.CALLER_FIELDS),
        job=related_columns(JobResult, "j"),
        run=", r.id AS r__id, r.started_at AS r__started_at" if in_progress else "",
        run_join=RUN_JOIN if in_progress else "",
    )
    for in_progress in (False, True)
}


class CallbackRefused(Exception):
    """A report that cannot be applied; ``status_code`` and ``detail`` are what the caller is told."""

    def __init__(self, status_code: int, detail: str):
        super().__init__(detail)
        self.status_code = status_code
        self.detail = detail


@dataclass(frozen=True)
class Known:
    """What a callback read before it writes (``callback_known``)."""

    backend: Backend | None  # None: the repo is not in the allowlist
    dispatch: Dispatch | None  # our dispatch of the delivery to it, its delivery's facts as attributes
    recorded: Recorded  # the job attempt as recorded, and its run's first start


@dataclass(frozen=True)
class CallbackOutcome:
    job: JobResult
    changed: bool  # False for an exact repeat of a report already applied: nothing was written

    @property
    def status(self) -> str:
        return self.job.status


def callback_known(*, repo: str, event_type: str, delivery_id: str, workflow: dict[str, Any]) -> Known:
    """The backend ``repo`` reports as, our dispatch of ``delivery_id`` to it and the job attempt ``workflow`` names,
    read in one statement; the caller checks the backend (``relay.endpoints.requests.backend_allowed``)."""
    attempt = _attempt_key(event_type=event_type, delivery_id=delivery_id, workflow=workflow)
    in_progress = workflow["status"] == JobResult.Status.IN_PROGRESS
    params = [delivery_id, *(attempt[name] for name in JobResult.ATTEMPT_FIELDS[1:])]
    if in_progress:
        params += [attempt[name] for name in jobs.RUN_FIELDS[1:]]
    found = row_parts(
        KNOWN_SQL[in_progress], [*params, repo], {**KNOWN_PARTS, **({"r": JobResult} if in_progress else {})}
    )
    if found is None:
        return Known(None, None, Recorded(None))
    opened = found.get("r")
    return Known(found["b"], found["d"], Recorded(found["j"], run_opened=opened.started_at if opened else None))


def _attempt_key(*, event_type: str, delivery_id: str, workflow: dict[str, Any]) -> dict[str, Any]:
    """The job attempt a callback names (``JobResult.ATTEMPT_FIELDS`` but its backend)."""
    return {
        "delivery_id": delivery_id.lower() if event_type in SELF_REPORT_EVENTS else delivery_id,
        "workflow_name": workflow["name"],
        "job_name": workflow.get("job_name") or "",
        "run_id": workflow["run_id"],
        "run_attempt": workflow.get("run_attempt") or 1,
    }


def callback_accept(
    *,
    backend: Backend,
    event_type: str,
    delivery_id: str,
    workflow: dict[str, Any],
    callback_token: str = "",
    environment: dict[str, Any] | None = None,
    known: Known | None = None,
) -> CallbackOutcome:
    """Apply one downstream report to its job attempt (DESIGN §3) on the relay's clock.

    ``backend`` is the verified caller. A PR/push report must answer a Dispatch we made to that backend;
    nightly/periodic self-reports need no dispatch, but their upstream SHA must be a commit GitHub knows (422 when
    it does not; accepted unverified when GitHub cannot say, ``relay.endpoints.sha_check``). Concurrent identical
    reports apply once; a contradicting one is refused with 409. Work that follows a new report (the check run) keys
    off ``changed``. ``known``: what ``callback_known`` read for it, not read again.
    """
    status = workflow["status"]
    if event_type in SELF_REPORT_EVENTS:
        upstream = _self_report_upstream(event_type=event_type, delivery_id=delivery_id, status=status)
        delivery_id = delivery_id.lower()
        dispatch = None
        upstream["sha_check"] = sha_check.upstream_sha_check(sha=delivery_id)
        if upstream["sha_check"] == JobResult.ShaCheck.UNKNOWN:
            raise CallbackRefused(422, sha_check.unknown_sha_detail(sha=delivery_id, event_type=event_type))
    else:
        dispatch = _callback_dispatch(
            backend=backend, delivery_id=delivery_id, callback_token=callback_token, known=known
        )
        upstream = {
            "dispatch": dispatch,
            "event_type": dispatch.event,
            "upstream_repo": dispatch.upstream_repo,
            "pr_number": dispatch.pr_number,
            "head_sha": dispatch.head_sha,
            # Completed with no in_progress before it: accepted, but the HUD can tell it has no timings.
            "one_shot": status == JobResult.Status.COMPLETED,
        }
    key = {"backend_id": backend.pk, **_attempt_key(event_type=event_type, delivery_id=delivery_id, workflow=workflow)}
    report = Report(
        status=status,
        source=JobResult.Source.CALLBACK,
        level=backend.level,
        at=timezone.now(),
        fields=_stated(workflow),
        environment=environment or {},
    )
    try:
        applied = job_report_apply(key=key, report=report, new=upstream, recorded=known and known.recorded)
    except JobConflict as e:
        raise CallbackRefused(409, e.detail) from e
    applied.job.backend = backend
    if applied.changed and dispatch is not None:
        check_runs.check_run_after_report(job=applied.job, pull_request_id=dispatch.pull_request_id)
    if applied.changed and applied.job.status == JobResult.Status.COMPLETED:
        job_id, conclusion = applied.job.pk, applied.job.conclusion  # a burst of successes: one task (follow_up_queue)
        transaction.on_commit(lambda: follow_up_queue.follow_up_queue(job_id, conclusion=conclusion), robust=True)
    return CallbackOutcome(applied.job, applied.changed)


def crcr_result_apply(*, trusted: dict[str, Any], report: dict[str, Any]) -> JobResult:
    """Create or update the job attempt a report forwarded by the reference relay describes (hud-spec §1.2–1.3):
    only the values it knows are written, and a completed job is not moved back to in_progress by a late or
    replayed in_progress report."""
    backend = Backend.objects.filter(repo__iexact=trusted["verified_repo"]).first()
    if backend is None:
        raise CallbackRefused(
            400, f"{trusted['verified_repo']} is not in the OOT CI allowlist: add it before sending results."
        )
    workflow = report["workflow"]
    delivery_id = report["delivery_id"]
    event_type = report.get("event_type") or Event.PULL_REQUEST
    self_report = event_type in SELF_REPORT_EVENTS
    key = {
        "backend_id": backend.pk,
        "delivery_id": delivery_id,
        "workflow_name": workflow["name"],
        "job_name": workflow["job_name"],
        "run_id": workflow.get("run_id") or "",
        "run_attempt": _attempt(workflow.get("run_attempt")),
    }
    new = {
        "event_type": event_type,
        "upstream_repo": settings.UPSTREAM_REPO,
        # Nightly rows name the tested SHA only in delivery_id.
        "head_sha": delivery_id if self_report and len(delivery_id) <= 40 else "",
        # Our own dispatch of this delivery to this backend, if we made one: linked, it is not counted as lost.
        "dispatch": None
        if self_report
        else Dispatch.objects.filter(backend=backend, delivery__delivery_id=delivery_id).first(),
    }
    forwarded = Report(
        status=workflow["status"],
        source=JobResult.Source.INGEST,
        level=trusted.get("downstream_repo_level") or backend.level,
        fields=_forwarded(trusted, report),
        merge=True,
    )
    applied = job_report_apply(key=key, report=forwarded, new=new)
    applied.job.backend = backend
    if applied.changed:
        logs.job_log_after_report(job=applied.job)  # a failed job's line and class, as for a callback
    return applied.job


def callback_rejection_record(*, repo: str, status_code: int, detail: str) -> bool:
    """Count a refused callback for the HUD; False when only logged (the flood guard above)."""
    logger.info("callback refused %s for %s: %s", status_code, repo or "an unverified caller", detail)
    budget = ratelimit.rate_limit_hit(key=f"callback-rejections:{repo.lower() or '-'}", limit=REJECTION_ROWS_PER_MIN)
    if not budget.allowed:
        logger.warning("callback rejections from %s over %s/min: not stored", repo or "-", REJECTION_ROWS_PER_MIN)
        return False
    CallbackRejection.objects.create(repo=repo[:140], status_code=status_code, detail=detail[:500])
    return True


def _callback_dispatch(
    *, backend: Backend, delivery_id: str, callback_token: str, known: Known | None = None
) -> Dispatch:
    """Our dispatch of ``delivery_id`` to ``backend``, with what a report needs of its delivery and PR as attributes
    (event, upstream_repo, head_sha, pull_request_id, pr_number); read by ``callback_known`` when ``known`` is given."""
    if known is not None:
        dispatch = known.dispatch
    else:
        # One statement, written out: on every callback the ORM took longer to compile this join than the database
        # to run it (tests/bench/bench_callback.py). Mapped as raw() maps it (ootci.rows).
        rows = rows_as(Dispatch, DISPATCH_OF_DELIVERY, [backend.pk, delivery_id])
        dispatch = rows[0] if rows else None
    if dispatch is None:
        raise CallbackRefused(
            403, f"No dispatch of delivery {delivery_id!r} was sent to {backend.repo}: nothing to report on."
        )
    # The token is optional (reporters written for the reference relay do not echo one), but one that is
    # echoed must be ours and bound to this delivery and repo: a copied token proves nothing.
    if callback_token and (
        problem := callback_token_problem(callback_token, delivery_id=delivery_id, repo=backend.repo)
    ):
        raise CallbackRefused(403, problem)
    dispatch.backend = backend
    return dispatch


def _self_report_upstream(*, event_type: str, delivery_id: str, status: str) -> dict[str, Any]:
    if status != JobResult.Status.COMPLETED:
        raise CallbackRefused(400, f"{event_type} callbacks must have status 'completed', got {status!r}.")
    if not UPSTREAM_SHA.match(delivery_id):
        raise CallbackRefused(
            400, f"A {event_type} callback's delivery_id is the tested upstream commit SHA, not {delivery_id!r}."
        )
    return {
        "event_type": event_type,
        "upstream_repo": settings.UPSTREAM_REPO,
        "pr_number": None,
        "head_sha": delivery_id.lower(),
    }


def _stated(workflow: dict[str, Any]) -> dict[str, Any]:
    """The JobResult fields a callback states; what it leaves out is not part of it (nor compared). Its own clock's
    times are not used: the relay times transitions itself."""
    stated: dict[str, Any] = {}
    if workflow.get("check_run_id"):
        stated["check_run_id"] = workflow["check_run_id"]
    if url := JobResult.safe_link(workflow.get("url")):
        stated["run_url"] = url
    if workflow["status"] != JobResult.Status.COMPLETED:
        return stated
    stated["conclusion"] = workflow["conclusion"]
    results = workflow.get("test_results") or {}
    stated.update({name: results[name] for name in ("passed", "failed", "skipped") if results.get(name) is not None})
    if results.get("failed_tests") is not None:
        stated["failed_tests"] = jobs.failed_tests_capped(results["failed_tests"])
    if url := JobResult.safe_link(workflow.get("artifact_url")):
        stated["artifact_url"] = url
    return stated


def _forwarded(trusted: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """The values a forwarded report knows: null or absent ones are not part of it, so they never erase."""
    workflow = report["workflow"]
    payload = report.get("payload") or {}
    pull_request = payload.get("pull_request") or {}
    metrics = trusted.get("ci_metrics") or {}
    fields = {
        "check_run_id": workflow["check_run_id"],
        "upstream_repo": (payload.get("repository") or {}).get("full_name"),
        "pr_number": pull_request.get("number") or None,
        "head_sha": (pull_request.get("head") or {}).get("sha") or payload.get("head_sha"),
        "queue_time": metrics.get("queue_time"),
        "execution_time": metrics.get("execution_time"),
        "started_at": workflow.get("started_at"),
        "run_url": JobResult.safe_link(workflow.get("url")),
        "artifact_url": JobResult.safe_link(workflow.get("artifact_url")),
    }
    if report.get("event_type"):
        fields["event_type"] = report["event_type"]
    if workflow["status"] == JobResult.Status.COMPLETED:
        results = workflow.get("test_results") or {}
        fields.update(
            conclusion=workflow.get("conclusion"),
            completed_at=workflow.get("completed_at"),
            passed=results.get("passed"),
            failed=results.get("failed"),
            skipped=results.get("skipped"),
        )
    return {name: value for name, value in fields.items() if value is not None and value != ""}


def _attempt(value: Any) -> int:
    # The reference HUD coerces: anything that is not a positive number counts as attempt 1.
    try:
        attempt = int(value)
    except (TypeError, ValueError):
        return 1
    return attempt if 1 <= attempt <= MAX_COUNT else 1
