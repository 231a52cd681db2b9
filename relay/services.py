"""Relay business logic: typed `<entity>_<action>` functions. Views and tasks call these; nothing else writes.

Sections: dispatch (webhooks in, repository_dispatch out) · callbacks (downstream results, state
machine, sweeper) · check runs and re-runs.
"""

import json
import logging
import queue
import random
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, connections, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django_q.tasks import async_task

from ootci import levels
from ootci.models import Backend, CallbackRejection, Delivery, Dispatch, Event, JobResult, PullRequest
from ootci.replication import job_results_changed
from relay import archive, github, ratelimit
from relay.tokens import callback_token_issue, callback_token_matches

logger = logging.getLogger(__name__)

# --- dispatch ----------------------------------------------------------------------------------

# GitHub's limit on a repository_dispatch client_payload is 64 KB; stay a little under it.
CLIENT_PAYLOAD_LIMIT = 64_000
# Free-text fields of webhook payloads (PR body, commit messages, descriptions) that may be cut to fit.
FREE_TEXT_KEYS = frozenset({"body", "message", "description"})
TRIM_MARK = "… [trimmed by OOT CI]"


@dataclass(frozen=True)
class DeliveryAccepted:
    delivery_id: str
    dispatches: int
    duplicate: bool = False


def delivery_accept(
    *, delivery_id: str, event: str, payload: dict[str, Any], body: bytes, dispatch: bool
) -> DeliveryAccepted:
    """Store a verified webhook delivery (and its PR) and, when ``dispatch``, one Dispatch per backend.

    Tasks are enqueued only once the rows are committed, so a task never looks for a row that is not
    there, and a crash before the commit leaves nothing half done. A redelivered id changes nothing.
    """
    try:
        with transaction.atomic():
            pr = _pull_request_record(payload) if event == "pull_request" else None
            delivery = Delivery.objects.create(
                delivery_id=delivery_id,
                event=event,
                action=payload.get("action") or "",
                upstream_repo=payload["repository"]["full_name"],
                head_sha=pr.head_sha if pr else (payload.get("after") or "")[:40],
                ref=pr.head_ref if pr else (payload.get("ref") or "")[:255],
                pull_request=pr,
                payload=payload,
            )
            count = _dispatches_create(delivery, pr) if dispatch else 0
    except IntegrityError:
        # Two deliveries of one id raced past the view's check; the unique constraint decided.
        if Delivery.objects.filter(delivery_id=delivery_id).exists():
            return DeliveryAccepted(delivery_id, 0, duplicate=True)
        raise
    transaction.on_commit(lambda: _delivery_enqueue(delivery.pk, body, count))
    return DeliveryAccepted(delivery_id, count)


def push_is_relayed(*, payload: dict[str, Any]) -> bool:
    """Pushes to the default branch and ``ciflow/...`` tags are relayed; deletions and other refs are not."""
    if payload.get("deleted"):
        return False
    ref = payload.get("ref") or ""
    default_branch = (payload.get("repository") or {}).get("default_branch") or "main"
    return ref == f"refs/heads/{default_branch}" or ref.startswith("refs/tags/ciflow/")


def delivery_dispatches_send(*, delivery_pk: int) -> dict[str, int]:
    """Send every pending dispatch of a delivery, concurrently."""
    pending = Dispatch.objects.filter(delivery_id=delivery_pk, status=Dispatch.Status.PENDING)
    return dispatches_send(dispatch_ids=list(pending.values_list("pk", flat=True)))


def dispatches_send(*, dispatch_ids: list[int]) -> dict[str, int]:
    """Send dispatches on a thread pool: GitHub's latency, not our CPU, bounds a fan-out.

    Returns how many ended sent, failed, pending (left for the sweeper) or skipped (claimed elsewhere).
    """
    workers = min(settings.DISPATCH_CONCURRENCY, len(dispatch_ids))
    if workers <= 1:
        return dict(Counter(dispatch_send(dispatch_id=pk) for pk in dispatch_ids))
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for pk in dispatch_ids:
        todo.put(pk)
    outcomes: Counter[str] = Counter()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dispatch") as pool:
        for counts in pool.map(_dispatches_send_from, [todo] * workers):
            outcomes.update(counts)
    return dict(outcomes)


def dispatch_send(*, dispatch_id: int) -> str:
    """Send one repository_dispatch, retrying failures; safe to run twice or concurrently.

    The Dispatch row is the outbox. A conditional UPDATE claims it (only a pending row that is new or
    stale), and every later write is fenced on the ``updated_at`` stamp of our claim, so two workers
    never both send. Every try counts in ``attempts``; failures (not rate limits) end it after
    DISPATCH_MAX_ATTEMPTS. A crash between GitHub's answer and our write means one resend after
    DISPATCH_STALE_SECONDS: GitHub has no idempotency key for dispatches, so delivery is at least once.
    """
    stamp = _dispatch_claim(dispatch_id)
    if stamp is None:
        return "skipped"
    dispatch = Dispatch.objects.select_related("delivery", "backend").get(pk=dispatch_id)
    client_payload, trimmed = dispatch_client_payload(dispatch=dispatch)
    failures = 0
    while True:
        try:
            github.repository_dispatch_create(
                repo=dispatch.backend.repo, event_type=dispatch.delivery.event, client_payload=client_payload
            )
        except github.RateLimited as e:
            if e.wait_seconds > settings.DISPATCH_RATE_LIMIT_MAX_WAIT_SECONDS:
                _dispatch_renew(dispatch_id, stamp, last_error=f"{e}; the sweeper sends it again later")
                return "pending"
            wait = e.wait_seconds
            stamp = _dispatch_renew(dispatch_id, stamp, last_error=str(e))
        except github.GitHubError as e:
            failures += 1
            if not e.retryable or failures >= settings.DISPATCH_MAX_ATTEMPTS:
                _dispatch_finish(dispatch_id, status=Dispatch.Status.FAILED, last_error=str(e), trimmed=trimmed)
                logger.warning("dispatch %s to %s failed: %s", dispatch_id, dispatch.backend.repo, e)
                return "failed"
            wait = _backoff(failures)
            stamp = _dispatch_renew(dispatch_id, stamp, last_error=str(e))
        else:
            _dispatch_finish(dispatch_id, status=Dispatch.Status.SENT, trimmed=trimmed)
            return "sent"
        if stamp is None:
            return "skipped"
        time.sleep(wait)
        stamp = _dispatch_renew(dispatch_id, stamp, attempts=F("attempts") + 1)
        if stamp is None:
            return "skipped"


def dispatch_client_payload(*, dispatch: Dispatch) -> tuple[dict[str, Any], bool]:
    """The client_payload of DESIGN §4, and whether free text had to be trimmed to fit GitHub's limit."""
    delivery = dispatch.delivery
    client_payload = {
        "event_type": delivery.event,
        "delivery_id": delivery.delivery_id,
        "payload": delivery.payload,
        "callback_token": callback_token_issue(delivery_id=delivery.delivery_id, repo=dispatch.backend.repo),
    }
    if _json_size(client_payload) <= CLIENT_PAYLOAD_LIMIT:
        return client_payload, False
    for keep in (2000, 200, 0):
        client_payload["payload"] = _free_text_cut(delivery.payload, keep)
        if _json_size(client_payload) <= CLIENT_PAYLOAD_LIMIT:
            return client_payload, True
    # Still too big without any free text (a push of many commits): the commit list goes, head_commit stays.
    client_payload["payload"] = {**client_payload["payload"], "commits": []}
    return client_payload, True


def dispatches_resend_stale() -> dict[str, int]:
    """Send pending dispatches nobody has touched for DISPATCH_STALE_SECONDS (task lost, worker killed)."""
    stale = timezone.now() - timedelta(seconds=settings.DISPATCH_STALE_SECONDS)
    ids = list(
        Dispatch.objects.filter(status=Dispatch.Status.PENDING, updated_at__lte=stale)
        .order_by("updated_at")
        .values_list("pk", flat=True)[:1000]
    )
    return dispatches_send(dispatch_ids=ids) if ids else {}


def dispatches_redispatch(*, dispatch_ids: list[int]) -> int:
    """Start a new round of attempts for failed dispatches (the admin's "redispatch"); returns how many."""
    with transaction.atomic():
        ids = list(
            Dispatch.objects.select_for_update()
            .filter(pk__in=dispatch_ids, status=Dispatch.Status.FAILED)
            .values_list("pk", flat=True)
        )
        # attempts back to 0 marks the rows claimable at once; last_error stays until the next try.
        Dispatch.objects.filter(pk__in=ids).update(
            status=Dispatch.Status.PENDING, attempts=0, updated_at=timezone.now()
        )
        for pk in ids:
            transaction.on_commit(lambda pk=pk: async_task("relay.tasks.dispatch_send", pk))
    return len(ids)


def delivery_archive(*, delivery_pk: int, body: bytes) -> str:
    """Archive the raw body of a delivery; returns the key. Failing here never touches the delivery."""
    delivery = Delivery.objects.get(pk=delivery_pk)
    if delivery.archive_key:
        return delivery.archive_key
    key = archive.archive_put(received_at=delivery.received_at, delivery_id=delivery.delivery_id, body=body)
    Delivery.objects.filter(pk=delivery_pk).update(archive_key=key)
    return key


def _pull_request_record(payload: dict[str, Any]) -> PullRequest:
    """Upsert the PR as this delivery shows it, unless we already hold a newer view of it."""
    data = payload["pull_request"]
    updated_at = parse_datetime(data.get("updated_at") or "") or timezone.now()
    fields = {
        "title": (data.get("title") or "")[:500],
        "author": ((data.get("user") or {}).get("login") or "")[:100],
        "head_sha": (data.get("head") or {}).get("sha") or "",
        "head_ref": ((data.get("head") or {}).get("ref") or "")[:255],
        "labels": [label["name"] for label in data.get("labels") or []],
        "state": _pull_request_state(data),
        "html_url": data.get("html_url") or "",
        "created_at": parse_datetime(data.get("created_at") or "") or timezone.now(),
        "updated_at": updated_at,
    }
    pr, created = PullRequest.objects.select_for_update().get_or_create(
        upstream_repo=payload["repository"]["full_name"], number=data["number"], defaults=fields
    )
    # Deliveries can arrive out of order; an older one must not roll back labels, head or state.
    if not created and pr.updated_at <= updated_at:
        for name, value in fields.items():
            setattr(pr, name, value)
        pr.save()
    if not pr.wants_check_runs:
        # A closed PR gets no more check runs: callbacks for its earlier dispatches will see this.
        Dispatch.objects.filter(delivery__pull_request=pr, check_run_wanted=True).update(check_run_wanted=False)
    return pr


def _pull_request_state(data: dict[str, Any]) -> str:
    if data.get("merged"):
        return PullRequest.State.MERGED
    return PullRequest.State.CLOSED if data.get("state") == "closed" else PullRequest.State.OPEN


def _dispatches_create(delivery: Delivery, pr: PullRequest | None) -> int:
    """Insert one pending Dispatch per enabled backend that takes this event; returns how many."""
    # Filtered in Python: JSONField "contains" is not available on SQLite, the embedded default.
    backends = Backend.objects.filter(enabled=True).values_list("pk", "level", "device", "events")
    wants = pr is not None and pr.wants_check_runs
    rows = [
        (pk, wants and levels.wants_check_run(level, device, pr.labels))
        for pk, level, device, events in backends
        if delivery.event in (events or [])
    ]
    if connection.vendor != "postgresql":
        Dispatch.objects.bulk_create(Dispatch(delivery=delivery, backend_id=b, check_run_wanted=w) for b, w in rows)
        return len(rows)
    # One statement with two array parameters, whatever the number of backends: bulk_create spends about
    # 0.1 ms of Python per row, which would make the webhook's answer time grow with the allowlist.
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {Dispatch._meta.db_table}
                (delivery_id, backend_id, check_run_wanted, status, attempts, last_error, payload_trimmed,
                 created_at, updated_at)
                SELECT %s, b, w, %s, 0, '', false, %s, %s FROM unnest(%s::bigint[], %s::boolean[]) AS t(b, w)""",
            [delivery.pk, Dispatch.Status.PENDING.value, now, now, [b for b, _ in rows], [w for _, w in rows]],
        )
    return len(rows)


def _delivery_enqueue(delivery_pk: int, body: bytes, dispatches: int) -> None:
    if dispatches:
        async_task("relay.tasks.delivery_dispatches_send", delivery_pk)
    if settings.ARCHIVE_URL:
        # The raw bytes travel with the task: the stored JSON is re-encoded and would not match the signature.
        async_task("relay.tasks.delivery_archive", delivery_pk, body)


def _dispatch_claim(dispatch_id: int) -> datetime | None:
    now = timezone.now()
    stale = now - timedelta(seconds=settings.DISPATCH_STALE_SECONDS)
    claimed = (
        Dispatch.objects.filter(pk=dispatch_id, status=Dispatch.Status.PENDING)
        .filter(Q(attempts=0) | Q(updated_at__lte=stale))
        .update(attempts=F("attempts") + 1, updated_at=now)
    )
    return now if claimed else None


def _dispatch_renew(dispatch_id: int, stamp: datetime, **fields: Any) -> datetime | None:
    """Write to a row we claimed, keeping the claim fresh; None when another worker has taken it over."""
    now = timezone.now()
    kept = Dispatch.objects.filter(pk=dispatch_id, status=Dispatch.Status.PENDING, updated_at=stamp).update(
        updated_at=now, **fields
    )
    return now if kept else None


def _dispatch_finish(dispatch_id: int, *, status: str, trimmed: bool, last_error: str | None = None) -> None:
    now = timezone.now()
    fields: dict[str, Any] = {"status": status, "payload_trimmed": trimmed, "updated_at": now}
    if status == Dispatch.Status.SENT:
        fields["sent_at"] = now
    if last_error is not None:
        fields["last_error"] = last_error
    Dispatch.objects.filter(pk=dispatch_id).update(**fields)


def _dispatches_send_from(todo: "queue.SimpleQueue[int]") -> Counter[str]:
    """One sending thread: takes dispatches until none are left (a slow one holds up no other)."""
    outcomes: Counter[str] = Counter()
    try:
        while True:
            try:
                dispatch_id = todo.get_nowait()
            except queue.Empty:
                return outcomes
            try:
                outcomes[dispatch_send(dispatch_id=dispatch_id)] += 1
            except Exception:
                # The row stays claimed and pending: the sweeper sends it once the claim is stale.
                logger.exception("dispatch %s crashed", dispatch_id)
                outcomes["error"] += 1
    finally:
        connections.close_all()  # this thread's own connections: threads of a pool must not leak them


def _backoff(failures: int) -> float:
    """Exponential backoff with equal jitter: spread retries of a fan-out that failed at once."""
    ceiling = min(settings.DISPATCH_RETRY_MAX_SECONDS, settings.DISPATCH_RETRY_BASE_SECONDS * 2 ** (failures - 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def _json_size(value: Any) -> int:
    return len(json.dumps(value).encode())


def _free_text_cut(value: Any, keep: int) -> Any:
    if isinstance(value, dict):
        return {k: _free_text_cut_field(k, v, keep) for k, v in value.items()}
    if isinstance(value, list):
        return [_free_text_cut(v, keep) for v in value]
    return value


def _free_text_cut_field(key: str, value: Any, keep: int) -> Any:
    if key in FREE_TEXT_KEYS and isinstance(value, str) and len(value) > keep:
        return value[:keep] + TRIM_MARK
    return _free_text_cut(value, keep)


# --- callbacks ---------------------------------------------------------------------------------

SELF_REPORT_EVENTS = frozenset({Event.NIGHTLY, Event.PERIODIC})
FAILED_TESTS_CAP = 1000  # entries kept per job
FAILED_TEST_TEXT_CAP = 1000  # characters kept per entry
UPSTREAM_SHA = re.compile(r"^[0-9a-fA-F]{7,40}$")
# Refused callbacks are counted in the database; past this many rows per minute and repo (unverified
# callers share one budget) they are only logged, so that a flood of junk cannot flood the table.
REJECTION_ROWS_PER_MIN = 300
SWEEP_BATCH = 500
LOST_LOOKBACK = timedelta(days=1)


class CallbackRefused(Exception):
    """A callback that cannot be applied; ``status_code`` and ``detail`` are what the caller is told."""

    def __init__(self, status_code: int, detail: str):
        super().__init__(detail)
        self.status_code = status_code
        self.detail = detail


@dataclass(frozen=True)
class CallbackOutcome:
    job: JobResult
    changed: bool  # False for an exact repeat of a report already applied: nothing was written

    @property
    def status(self) -> str:
        return self.job.status


@dataclass(frozen=True)
class SweepResult:
    timed_out: list[int]  # ids of the jobs this sweep concluded as timed_out
    lost: int  # dispatches to L2+ backends never called back, sent in the day before the cut-off


def callback_accept(
    *, backend: Backend, event_type: str, delivery_id: str, workflow: dict[str, Any], callback_token: str = ""
) -> CallbackOutcome:
    """Apply one downstream report to its job attempt: the state machine of DESIGN §3, atomically.

    ``backend`` is the verified caller. A PR/push report must answer a Dispatch we made to that backend;
    what it echoes of the upstream event is untrusted, so the PR number and SHA come from our Delivery.
    Nightly/periodic self-reports need no dispatch. The job attempt row is locked (or created) inside
    one transaction, so concurrent identical reports apply once. The outcome carries the row as written
    and whether this call changed it: work that must follow a new report keys off ``changed``.
    """
    now = timezone.now()
    if event_type in SELF_REPORT_EVENTS:
        upstream = _self_report_upstream(event_type=event_type, delivery_id=delivery_id, status=workflow["status"])
        delivery_id = delivery_id.lower()
    else:
        dispatch = _callback_dispatch(backend=backend, delivery_id=delivery_id, callback_token=callback_token)
        upstream = _dispatch_upstream(dispatch)
    key = {
        "backend": backend,
        "delivery_id": delivery_id,
        "workflow_name": workflow["name"],
        "job_name": workflow.get("job_name") or "",
        "run_id": workflow["run_id"],
        "run_attempt": workflow.get("run_attempt") or 1,
    }
    report = _job_report(workflow)
    new = _job_new(upstream, key, workflow["status"], report, level=backend.level, now=now)
    # The usual first report of a job attempt is a bare INSERT; the unique constraint turns a second one away.
    job = _job_insert({**key, **new}) if workflow["status"] == JobResult.Status.IN_PROGRESS else None
    changed = job is not None
    if job is None:
        with transaction.atomic():
            job, created = JobResult.objects.select_for_update().get_or_create(**key, defaults=new)
            changed = created or _job_advance(job, workflow["status"], report, level=backend.level, now=now)
    if changed:
        job_results_changed()
    return CallbackOutcome(job, changed)


def callback_rejection_record(*, repo: str, status_code: int, detail: str) -> bool:
    """Count a refused callback for the HUD; False when only logged (the flood guard above)."""
    logger.info("callback refused %s for %s: %s", status_code, repo or "an unverified caller", detail)
    budget = ratelimit.rate_limit_hit(key=f"callback-rejections:{repo.lower() or '-'}", limit=REJECTION_ROWS_PER_MIN)
    if not budget.allowed:
        logger.warning("callback rejections from %s over %s/min: not stored", repo or "-", REJECTION_ROWS_PER_MIN)
        return False
    CallbackRejection.objects.create(repo=repo[:140], status_code=status_code, detail=detail[:500])
    return True


def jobs_sweep(*, now: datetime | None = None) -> SweepResult:
    """Conclude jobs in progress for longer than ZOMBIE_TIMEOUT_HOURS as timed_out, decided by the relay.

    Each row is claimed with a conditional UPDATE, so a completion arriving meanwhile wins and two
    sweepers never conclude one job twice. A genuine completion arriving later still replaces the
    relay's verdict (see ``_job_advance``).
    """
    now = now or timezone.now()
    cutoff = now - timedelta(hours=settings.ZOMBIE_TIMEOUT_HOURS)
    stale = Q(started_at__lt=cutoff) | Q(started_at__isnull=True, created_at__lt=cutoff)
    timed_out: list[int] = []
    while True:
        batch = list(
            JobResult.objects.filter(stale, status=JobResult.Status.IN_PROGRESS)
            .order_by("pk")
            .values_list("pk", "started_at", "created_at")[:SWEEP_BATCH]
        )
        for pk, started_at, created_at in batch:
            claimed = JobResult.objects.filter(pk=pk, status=JobResult.Status.IN_PROGRESS).update(
                status=JobResult.Status.COMPLETED,
                conclusion="timed_out",
                completed_at=now,
                execution_time=_seconds_between(started_at or created_at, now),
                relay_decided=True,
                source=JobResult.Source.SWEEPER,
                updated_at=now,  # replication follows updated_at, which update() does not touch
            )
            if claimed:
                timed_out.append(pk)
        if len(batch) < SWEEP_BATCH:
            break
    if timed_out:
        job_results_changed()
    lost = _dispatches_lost(since=cutoff - LOST_LOOKBACK, before=cutoff)
    if timed_out or lost:
        logger.warning(
            "sweep: %d jobs timed out, %d dispatches lost (sent the day before %s)", len(timed_out), lost, cutoff
        )
    return SweepResult(timed_out, lost)


def failed_tests_capped(entries: list[Any]) -> list[str]:
    """The failed-test list as stored: text entries, at most FAILED_TESTS_CAP, each at most FAILED_TEST_TEXT_CAP."""
    kept = []
    for entry in entries:
        text = _failed_test_text(entry).replace("\x00", "").strip()
        if not text:
            continue
        kept.append(text if len(text) <= FAILED_TEST_TEXT_CAP else text[: FAILED_TEST_TEXT_CAP - 1] + "…")
        if len(kept) == FAILED_TESTS_CAP:
            break
    return kept


def _callback_dispatch(*, backend: Backend, delivery_id: str, callback_token: str) -> Dispatch:
    try:
        dispatch = Dispatch.objects.select_related("delivery__pull_request").get(
            backend=backend, delivery__delivery_id=delivery_id
        )
    except Dispatch.DoesNotExist:
        raise CallbackRefused(
            403, f"No dispatch of delivery {delivery_id!r} was sent to {backend.repo}: nothing to report on."
        ) from None
    # The token is optional (reporters written for the reference relay do not echo one), but one that is
    # echoed must be ours and bound to this delivery and repo: a copied token proves nothing.
    if callback_token and not callback_token_matches(callback_token, delivery_id=delivery_id, repo=backend.repo):
        raise CallbackRefused(403, f"The callback_token was not issued for delivery {delivery_id!r} to {backend.repo}.")
    return dispatch


def _dispatch_upstream(dispatch: Dispatch) -> dict[str, Any]:
    delivery = dispatch.delivery
    return {
        "dispatch": dispatch,
        "event_type": delivery.event,
        "upstream_repo": delivery.upstream_repo,
        "pr_number": delivery.pull_request.number if delivery.pull_request else None,
        "head_sha": delivery.head_sha,
    }


def _self_report_upstream(*, event_type: str, delivery_id: str, status: str) -> dict[str, Any]:
    if status != JobResult.Status.COMPLETED:
        raise CallbackRefused(400, f"{event_type} callbacks must have status 'completed', got {status!r}.")
    if not UPSTREAM_SHA.match(delivery_id):
        raise CallbackRefused(
            400, f"A {event_type} callback's delivery_id is the tested upstream commit SHA, not {delivery_id!r}."
        )
    return {
        "dispatch": None,
        "event_type": event_type,
        "upstream_repo": settings.UPSTREAM_REPO,
        "pr_number": None,
        "head_sha": delivery_id.lower(),
    }


def _job_report(workflow: dict[str, Any]) -> dict[str, Any]:
    """The JobResult fields this report states; what it leaves out is not part of it (nor compared)."""
    report: dict[str, Any] = {}
    if workflow.get("check_run_id"):
        report["check_run_id"] = workflow["check_run_id"]
    if url := JobResult.safe_link(workflow.get("url")):
        report["run_url"] = url
    if workflow["status"] != JobResult.Status.COMPLETED:
        return report
    report["conclusion"] = workflow["conclusion"]
    results = workflow.get("test_results") or {}
    report.update({name: results[name] for name in ("passed", "failed", "skipped") if results.get(name) is not None})
    if results.get("failed_tests") is not None:
        report["failed_tests"] = failed_tests_capped(results["failed_tests"])
    if url := JobResult.safe_link(workflow.get("artifact_url")):
        report["artifact_url"] = url
    return report


def _job_insert(fields: dict[str, Any]) -> JobResult | None:
    """The new row, or None when the job attempt exists. Outside a transaction this is one round trip."""
    savepoint = transaction.atomic() if transaction.get_connection().in_atomic_block else nullcontext()
    try:
        with savepoint:
            return JobResult.objects.create(**fields)
    except IntegrityError:
        return None


def _job_new(
    upstream: dict[str, Any], key: dict[str, Any], status: str, report: dict[str, Any], *, level: str, now: datetime
) -> dict[str, Any]:
    fields = {**upstream, **report, "status": status, "level": level, "source": JobResult.Source.CALLBACK}
    if status == JobResult.Status.IN_PROGRESS:
        fields["started_at"] = now
        dispatch = upstream["dispatch"]
        # Re-runs reuse the original dispatch, days old: a queue time only means something for attempt 1.
        if key["run_attempt"] == 1 and dispatch.sent_at:
            fields["queue_time"] = _seconds_between(dispatch.sent_at, now)
    else:
        fields["completed_at"] = now
        # Completed with no in_progress before it: accepted, but the HUD can tell it has no timings.
        # Self-reports are completed-only by design, so they are not flagged.
        fields["one_shot"] = upstream["dispatch"] is not None
    return fields


def _job_advance(job: JobResult, status: str, report: dict[str, Any], *, level: str, now: datetime) -> bool:
    """Apply a report to an existing (locked) job attempt: True when written, False for an exact repeat."""
    stated = all(getattr(job, name) == value for name, value in report.items())
    if status == JobResult.Status.IN_PROGRESS:
        if job.status == JobResult.Status.IN_PROGRESS and stated:
            return False
        if job.status == JobResult.Status.COMPLETED:
            raise CallbackRefused(409, f"{_job_name(job)} already completed ({job.conclusion}): it cannot go back.")
        differences = _differences(job, report)
        raise CallbackRefused(409, f"{_job_name(job)} is already in progress with other details ({differences}).")
    # A genuine completion replaces the relay's timed_out verdict: the job was slow, not lost.
    if job.status == JobResult.Status.COMPLETED and not job.relay_decided:
        if stated:
            return False
        raise CallbackRefused(409, f"{_job_name(job)} already completed differently ({_differences(job, report)}).")
    for name, value in report.items():
        setattr(job, name, value)
    job.status = JobResult.Status.COMPLETED
    job.completed_at = now
    job.execution_time = _seconds_between(job.started_at, now) if job.started_at else None
    job.level = level
    job.relay_decided = False
    job.source = JobResult.Source.CALLBACK
    job.save()
    return True


def _job_name(job: JobResult) -> str:
    return f"Job {job.workflow_name}/{job.job_name} run {job.run_id} attempt {job.run_attempt}"


def _differences(job: JobResult, report: dict[str, Any]) -> str:
    return (
        ", ".join(
            f"{name} {getattr(job, name)!r} ≠ {value!r}"
            for name, value in report.items()
            if getattr(job, name) != value and name != "failed_tests"
        )
        or "failed_tests differ"
    )


def _seconds_between(start: datetime, end: datetime) -> float:
    # Clocks are ours on both ends, but a dispatch row's sent_at can be written after a fast callback.
    return round(max(0.0, (end - start).total_seconds()), 3)


def _failed_test_text(entry: Any) -> str:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict):
        name = str(entry.get("name") or entry.get("nodeid") or entry.get("test") or "")
        message = str(entry.get("message") or "")
        if name:
            return f"{name}: {message}" if message else name
    return json.dumps(entry, ensure_ascii=False)


def _dispatches_lost(*, since: datetime, before: datetime) -> int:
    """Dispatches to backends shown on the HUD that no job ever reported on (the HUD counts them as failures)."""
    shown = [level for level in levels.ORDER if levels.policy(level).display_on_hud]
    return (
        Dispatch.objects.filter(
            status__in=[Dispatch.Status.SENT, Dispatch.Status.PENDING],
            created_at__gte=since,
            created_at__lt=before,
            backend__level__in=shown,
        )
        .filter(~Exists(JobResult.objects.filter(dispatch=OuterRef("pk"))))
        .count()
    )


# --- check runs and re-runs --------------------------------------------------------------------
