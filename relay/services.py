"""Relay business logic: typed `<entity>_<action>` functions. Views and tasks call these; nothing else writes.

Sections: dispatch (webhooks in, repository_dispatch out) · callbacks (downstream results, state
machine, sweeper) · check runs and re-runs.
"""

import functools
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
from django.db.models import Exists, F, Field, Model, OuterRef, Q
from django.db.models.sql import Query
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django_q.models import Schedule
from django_q.tasks import async_task, schedule

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
    # The usual reports of a job attempt take one statement each: in_progress a bare INSERT (the unique constraint
    # turns a second one away), completed a conditional UPDATE of the attempt in progress. The rest (a one-shot
    # completion, a repeat, a conflict) takes the locked path.
    if workflow["status"] == JobResult.Status.IN_PROGRESS:
        job = _job_insert({**key, **new})
    else:
        job = _job_complete(key, report, level=backend.level, now=now)
    changed = job is not None
    if job is None:
        with transaction.atomic():
            job, created = JobResult.objects.select_for_update().get_or_create(**key, defaults=new)
            changed = created or _job_advance(job, workflow["status"], report, level=backend.level, now=now)
    if changed:
        job_results_changed()
        if upstream["dispatch"] is not None:
            _check_runs_after_report(job=job, backend=backend, pr=upstream["dispatch"].delivery.pull_request)
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
        _check_runs_after_sweep(timed_out)
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
    dispatch = _dispatch_find(backend=backend, delivery_id=delivery_id)
    if dispatch is None:
        raise CallbackRefused(
            403, f"No dispatch of delivery {delivery_id!r} was sent to {backend.repo}: nothing to report on."
        )
    # The token is optional (reporters written for the reference relay do not echo one), but one that is
    # echoed must be ours and bound to this delivery and repo: a copied token proves nothing.
    if callback_token and not callback_token_matches(callback_token, delivery_id=delivery_id, repo=backend.repo):
        raise CallbackRefused(403, f"The callback_token was not issued for delivery {delivery_id!r} to {backend.repo}.")
    return dispatch


def _dispatch_find(*, backend: Backend, delivery_id: str) -> Dispatch | None:
    """The dispatch of ``delivery_id`` to ``backend``, with its delivery and pull request, in one round trip.

    What ``select_related("delivery__pull_request")`` does, written out: on every callback the ORM spent ~1 ms
    compiling that three-table query, four times the cost of running it (2 cores). Values go through the ORM's
    own converters. The delivery's payload, the whole webhook body, is left deferred: nothing here reads it.
    """
    db = transaction.get_connection()
    sql, parts, converters = _dispatch_find_query()
    with db.cursor() as cursor:
        cursor.execute(sql, [backend.pk, delivery_id])
        row = cursor.fetchone()
    if row is None:
        return None
    compiler = db.ops.compiler("SQLCompiler")(Query(Dispatch), db, db.alias)
    values = iter(next(compiler.apply_converters([row], converters)))
    dispatch, delivery, pr = (
        model.from_db(db.alias, [f.attname for f in fields], [next(values) for _ in fields]) for model, fields in parts
    )
    delivery.pull_request = pr if pr.pk is not None else None
    dispatch.delivery = delivery
    dispatch.backend = backend
    return dispatch


@functools.cache
def _dispatch_find_query() -> tuple[str, list[tuple[type[Model], list[Field]]], dict]:
    db = transaction.get_connection()
    parts = [
        (Dispatch, "d", Dispatch._meta.concrete_fields),
        (Delivery, "dl", [f for f in Delivery._meta.concrete_fields if f.name != "payload"]),
        (PullRequest, "pr", PullRequest._meta.concrete_fields),
    ]
    columns = [field.get_col(alias) for _, alias, fields in parts for field in fields]
    qn = db.ops.quote_name
    sql = (
        f"SELECT {', '.join(f'{col.alias}.{qn(col.target.column)}' for col in columns)}"
        f" FROM {qn(Dispatch._meta.db_table)} d JOIN {qn(Delivery._meta.db_table)} dl ON dl.id = d.delivery_id"
        f" LEFT JOIN {qn(PullRequest._meta.db_table)} pr ON pr.id = dl.pull_request_id"
        " WHERE d.backend_id = %s AND dl.delivery_id = %s"
    )
    converters = db.ops.compiler("SQLCompiler")(Query(Dispatch), db, db.alias).get_converters(columns)
    return sql, [(model, list(fields)) for model, _, fields in parts], converters


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


def _job_complete(key: dict[str, Any], report: dict[str, Any], *, level: str, now: datetime) -> JobResult | None:
    """``_job_advance`` of a completed report as one conditional UPDATE: the attempt in progress (or concluded by
    the relay) is completed and returned; None when it is in no such state, or absent, for the locked path to decide.

    It saves a transaction of four round trips on every second callback. PostgreSQL only: the execution time is
    computed in SQL (rounded like ``_seconds_between``); the embedded SQLite default takes the locked path.
    """
    if connection.vendor != "postgresql":
        return None
    fields = {
        **report,
        "status": JobResult.Status.COMPLETED,
        "completed_at": now,
        "level": level,
        "relay_decided": False,
        "source": JobResult.Source.CALLBACK,
        "updated_at": timezone.now(),  # what save() would set (auto_now); replication follows it
    }
    meta, qn = JobResult._meta, connection.ops.quote_name
    assignments = ", ".join(f"{qn(meta.get_field(name).column)} = %s" for name in fields)
    params = [meta.get_field(name).get_db_prep_save(value, connection) for name, value in fields.items()]
    sql = (
        f"UPDATE {qn(meta.db_table)} SET {assignments},"
        " execution_time = CASE WHEN started_at IS NULL THEN NULL"
        " ELSE round(greatest(0, extract(epoch FROM %s - started_at))::numeric, 3)::float8 END"
        " WHERE backend_id = %s AND delivery_id = %s AND workflow_name = %s AND job_name = %s AND run_id = %s"
        " AND run_attempt = %s AND (status = %s OR relay_decided) RETURNING *"
    )
    params += [now, key["backend"].pk, key["delivery_id"], key["workflow_name"], key["job_name"], key["run_id"]]
    params += [key["run_attempt"], JobResult.Status.IN_PROGRESS]
    # raw() maps the returned row onto the model through the ORM's converters, as a SELECT would.
    return next(iter(JobResult.objects.raw(sql, params)), None)


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

# One upstream check run shows one job attempt: created once, then PATCHed as the attempt moves on (repeated
# or concurrent syncs never create a second one). A new attempt of the job (a re-run) gets a new check run of
# the same name, which supersedes the old one on the PR: GitHub does not let a completed check run go back to
# in_progress or change its conclusion.
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
# First key of pg_advisory_xact_lock(int, int): the lock space of check-run syncs (the second is the job id).
CHECK_RUN_LOCK_SPACE = 0x0C4EC


@dataclass(frozen=True)
class RerunTarget:
    backend: Backend
    run_id: str


@dataclass(frozen=True)
class RerunAccepted:
    delivery_id: str
    queued: bool
    reason: str = ""  # why nothing was queued


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
    fields: dict[str, Any] = {
        "status": job.status,
        "external_id": check_run_external_id(backend_id=job.backend_id, run_id=job.run_id),
        "output": _check_run_output(job),
    }
    if job.run_url:
        fields["details_url"] = job.run_url
    if job.started_at:
        fields["started_at"] = job.started_at
    if job.status == JobResult.Status.COMPLETED:
        fields["conclusion"] = _check_run_conclusion(job)
        fields["completed_at"] = job.completed_at or timezone.now()
    return fields


def check_run_sync(*, job_id: int, attempt: int = 1) -> str:
    """Bring the upstream check run of one job attempt in line with the row; safe to run twice or concurrently.

    A row with a check run id gets a PATCH. A row without one gets a check run created when it is the
    latest attempt of its job and the check run is wanted (``check_run_wanted``); an older attempt is
    superseded and left alone. An advisory lock per job attempt serialises syncs, so two tasks never both
    create. A failure worth retrying schedules this task again with backoff; GitHub's answer never reaches
    the callback that enqueued it. Returns what happened.
    """
    with transaction.atomic():
        _check_run_lock(job_id)
        job = JobResult.objects.select_related("backend").filter(pk=job_id).first()
        if job is None or job.event_type != Event.PULL_REQUEST or not job.head_sha:
            return "skipped"
        try:
            if job.upstream_check_run_id is not None:
                return _check_run_update(job)
            return _check_run_create(job, attempt)
        except github.GitHubError as e:
            return _check_run_retry(job, e, attempt)


def pull_request_labels_apply(*, payload: dict[str, Any]) -> int:
    """After a ``labeled``/``unlabeled`` delivery is recorded: keep the PR's dispatches' ``check_run_wanted`` in
    step with its stored labels and, when a ``ciflow/oot/<device>`` label was added, queue the backfill of
    check runs for jobs that reported before it. Returns how many dispatches changed.

    Removing the label stops new check runs; those already on the PR stay and still get their completion,
    so none is left spinning.
    """
    data = payload.get("pull_request") or {}
    repo = (payload.get("repository") or {}).get("full_name") or ""
    pr = PullRequest.objects.filter(upstream_repo=repo, number=data.get("number")).first()
    if pr is None:
        return 0
    changed = 0
    backends = Backend.objects.filter(dispatches__delivery__pull_request=pr).values_list("pk", "level", "device")
    for backend_id, level, device in set(backends):
        wanted = pr.wants_check_runs and levels.wants_check_run(level, device, pr.labels)
        changed += (
            Dispatch.objects.filter(delivery__pull_request=pr, backend_id=backend_id)
            .exclude(check_run_wanted=wanted)
            .update(check_run_wanted=wanted)
        )
    label = ((payload.get("label") or {}).get("name") or "").strip()
    if payload.get("action") == "labeled" and label.startswith(levels.L3_LABEL_PREFIX) and pr.wants_check_runs:
        transaction.on_commit(lambda: async_task("relay.tasks.pull_request_check_runs_backfill", pr.pk))
    return changed


def pull_request_check_runs_backfill(*, pull_request_pk: int) -> int:
    """Queue check runs for the jobs that reported on the PR's head before a label selected their backend:
    the latest attempt of each job, in progress or completed, from the stored results (nothing re-runs)."""
    pr = PullRequest.objects.filter(pk=pull_request_pk).first()
    if pr is None or not pr.wants_check_runs or not pr.head_sha:
        return 0
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
        .order_by("-created_at", "-pk")
        .values_list("pk", "backend_id", "workflow_name", "job_name", "upstream_check_run_id")
    )
    latest: dict[tuple[int, str, str], tuple[int, int | None]] = {}
    for pk, backend_id, workflow_name, job_name, check_run_id in attempts:
        latest.setdefault((backend_id, workflow_name, job_name), (pk, check_run_id))
    due = [pk for pk, check_run_id in latest.values() if check_run_id is None]
    _check_runs_enqueue(due)
    return len(due)


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
            )
            transaction.on_commit(lambda: async_task("relay.tasks.rerun_request", delivery.pk))
    except IntegrityError:
        return RerunAccepted(delivery_id, False, "duplicate delivery")
    sender = (payload.get("sender") or {}).get("login") or "?"
    logger.info("re-run of %s %s requested by %s (PR %s)", event, subject.get("id"), sender, pr and pr.number)
    return RerunAccepted(delivery_id, True)


def rerun_request_handle(*, delivery_pk: int, attempt: int = 1, only: list[list[Any]] | None = None) -> dict[str, int]:
    """Re-run the failed jobs of every distinct downstream run a re-run request names; safe to run twice.

    ``check_run``: the run in its external_id. ``check_suite``: the runs of the suite's check runs, deduplicated
    (a failed workflow run shows as many failed checks). A run already running is not an error. Runs GitHub
    failed on in a way worth retrying (``only``, as [backend id, run id] pairs) are tried again later.
    """
    delivery = Delivery.objects.get(pk=delivery_pk)
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


def _check_runs_enqueue(job_ids: list[int]) -> None:
    for pk in job_ids:
        transaction.on_commit(lambda pk=pk: async_task("relay.tasks.check_run_sync", pk))


def _check_runs_after_report(*, job: JobResult, backend: Backend, pr: PullRequest | None) -> None:
    """Queue the sync of a job's check run after a report changed it, when it has one or one is wanted."""
    job.backend = backend
    if job.upstream_check_run_id is not None or check_run_wanted(job=job, pr=pr):
        _check_runs_enqueue([job.pk])


def _check_runs_after_sweep(job_ids: list[int]) -> None:
    """Queue the sync of the check runs of jobs the sweeper timed out: completed as timed_out, or created so."""
    on_pr = [level for level in levels.ORDER if levels.policy(level).display_on_pr != levels.PrDisplay.NEVER]
    for start in range(0, len(job_ids), SWEEP_BATCH):
        ids = JobResult.objects.filter(
            Q(backend__level__in=on_pr) | Q(upstream_check_run_id__isnull=False),
            pk__in=job_ids[start : start + SWEEP_BATCH],
            event_type=Event.PULL_REQUEST,
            dispatch__isnull=False,
        ).values_list("pk", flat=True)
        _check_runs_enqueue(list(ids))


def _check_run_lock(job_id: int) -> None:
    # Held to the end of the caller's transaction. The embedded SQLite default serialises writers anyway.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [CHECK_RUN_LOCK_SPACE, job_id % 2**31])


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
    logger.info("check run %s %s for %s on %s", check_run_id, name, _job_name(job), job.head_sha)
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
        logger.info("check run %s %s replaces %s for %s", check_run_id, name, job.upstream_check_run_id, _job_name(job))
        return "replaced"
    return "updated"


def _job_check_run_store(job: JobResult, check_run_id: int, *, replace: bool = False) -> None:
    rows = JobResult.objects.filter(pk=job.pk)
    if not replace:
        rows = rows.filter(upstream_check_run_id__isnull=True)
    # updated_at by hand: update() skips auto_now, and replication follows updated_at.
    if rows.update(upstream_check_run_id=check_run_id, updated_at=timezone.now()):
        job_results_changed()


def _job_superseded(job: JobResult) -> bool:
    """Whether a later attempt of the same job (backend, head SHA, workflow, job name) has reported."""
    return (
        JobResult.objects.filter(
            backend_id=job.backend_id,
            upstream_repo=job.upstream_repo,
            head_sha=job.head_sha,
            event_type=job.event_type,
            workflow_name=job.workflow_name,
            job_name=job.job_name,
        )
        .filter(Q(created_at__gt=job.created_at) | Q(created_at=job.created_at, pk__gt=job.pk))
        .exists()
    )


def _check_run_retry(job: JobResult, error: github.GitHubError, attempt: int) -> str:
    if not error.retryable or attempt >= CHECK_RUN_MAX_ATTEMPTS:
        logger.warning("check run of %s: giving up after try %d: %s", _job_name(job), attempt, error)
        return "failed"
    wait = _github_retry_wait(error, attempt)
    schedule(
        "relay.tasks.check_run_sync",
        job.pk,
        attempt + 1,
        schedule_type=Schedule.ONCE,
        next_run=timezone.now() + timedelta(seconds=wait),
    )
    logger.info("check run of %s: try %d failed (%s); again in %.0f s", _job_name(job), attempt, error, wait)
    return "retrying"


def _rerun_retry(
    delivery: Delivery, error: github.GitHubError | None, attempt: int, only: list[list[Any]] | None
) -> dict[str, int]:
    if (error is not None and not error.retryable) or attempt >= CHECK_RUN_MAX_ATTEMPTS:
        logger.warning("re-run request %s: giving up after try %d: %s", delivery.delivery_id, attempt, error)
        return {"failed": 1}
    wait = _github_retry_wait(error, attempt)
    schedule(
        "relay.tasks.rerun_request",
        delivery.pk,
        attempt + 1,
        only,
        schedule_type=Schedule.ONCE,
        next_run=timezone.now() + timedelta(seconds=wait),
    )
    return {"retrying": len(only) if only else 1}


def _github_retry_wait(error: github.GitHubError | None, attempt: int) -> float:
    if isinstance(error, github.RateLimited):
        return error.wait_seconds
    # A schedule rather than a sleep: the worker is free meanwhile, and a GitHub outage of minutes is ridden out.
    return min(CHECK_RUN_RETRY_MAX_SECONDS, settings.DISPATCH_RETRY_BASE_SECONDS * 4 ** (attempt - 1))


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
    on_pr = [level for level in levels.ORDER if levels.policy(level).display_on_pr != levels.PrDisplay.NEVER]
    backend = Backend.objects.filter(pk=int(match["backend"]), enabled=True, level__in=on_pr).first()
    if backend is None:
        return None
    recorded = JobResult.objects.filter(backend=backend, run_id=match["run_id"], event_type=Event.PULL_REQUEST)
    return RerunTarget(backend, match["run_id"]) if recorded.exists() else None


def _github_app_id(subject: dict[str, Any]) -> str:
    app = subject.get("app")
    return str(app.get("id") or "") if isinstance(app, dict) else ""


def _check_run_conclusion(job: JobResult) -> str:
    return job.conclusion if job.conclusion in CHECK_RUN_CONCLUSIONS else "neutral"


def _check_run_output(job: JobResult) -> dict[str, str]:
    if job.status == JobResult.Status.COMPLETED:
        title = _check_run_conclusion(job).replace("_", " ").capitalize()
    else:
        title = "In progress"
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
        for label, value in (("Queue time", job.queue_time), ("Execution time", job.execution_time))
        if value is not None
    ]
    if timings:
        lines += ["", " · ".join(timings)]
    if job.relay_decided:
        lines += ["", f"No completion was reported within {settings.ZOMBIE_TIMEOUT_HOURS:g} h: OOT CI timed it out."]
    if job.artifact_url:
        lines += ["", f"[Test artifacts]({job.artifact_url})"]
    output = {"title": title, "summary": "\n".join(lines)[:CHECK_RUN_OUTPUT_LIMIT]}
    if job.failed_tests:
        output["text"] = _check_run_failed_tests_text(job)
    return output


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
