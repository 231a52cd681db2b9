"""Webhook intake: a verified upstream delivery and everything it means, stored in one transaction.

A delivery is its Delivery row, the pull request as it shows it, and either its Dispatch rows (the outbox that
relay.github.outbox sends) or, for an effect that is a task (a label's check-run backfill, a re-run request), the
Delivery marked ``pending`` until that task has run. Tasks are enqueued once the transaction commits; an enqueue that
fails (broker down) fails nothing: the stale-dispatch and pending-delivery schedules finish the work.
"""

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django_q.tasks import async_task

from ootci import levels
from ootci.models import Backend, Delivery, Dispatch, PullRequest

logger = logging.getLogger(__name__)

# The task that carries out a pending delivery's effect, by event; it clears ``Delivery.pending``.
EFFECT_TASKS = {
    "pull_request": "relay.tasks.pull_request_check_runs_backfill",
    "check_run": "relay.tasks.rerun_request",
    "check_suite": "relay.tasks.rerun_request",
}
# A pending delivery older than this is presumed to have lost its task and is finished by the schedule.
PENDING_STALE = timedelta(seconds=60)


@dataclass(frozen=True)
class DeliveryAccepted:
    delivery_id: str
    dispatches: int
    duplicate: bool = False


def delivery_accept(
    *, delivery_id: str, event: str, payload: dict[str, Any], body: bytes, dispatch: bool
) -> DeliveryAccepted:
    """Store a verified webhook delivery (and its PR) and, when ``dispatch``, one Dispatch per backend; a label that
    selects an L3 backend's check runs marks the delivery pending for the backfill of check runs.

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
                pending=pr is not None and _label_adds_check_runs(payload, pr),
            )
            count = _dispatches_create(delivery) if dispatch else 0
    except IntegrityError:
        # Two deliveries of one id raced past the view's check; the unique constraint decided.
        if Delivery.objects.filter(delivery_id=delivery_id).exists():
            return DeliveryAccepted(delivery_id, 0, duplicate=True)
        raise
    transaction.on_commit(lambda: _delivery_enqueue(delivery, body, count), robust=True)
    return DeliveryAccepted(delivery_id, count)


def delivery_effect_enqueue(delivery: Delivery) -> None:
    """Queue the task of a pending delivery once the transaction that stored it commits."""
    transaction.on_commit(lambda: _delivery_enqueue(delivery, None, 0), robust=True)


def deliveries_finish_pending(*, now=None) -> int:
    """Queue again the effect of every delivery still pending after PENDING_STALE (its task was lost); returns how
    many. The effect tasks are safe to run twice."""
    before = (now or timezone.now()) - PENDING_STALE
    pending = Delivery.objects.filter(pending=True, received_at__lte=before).order_by("received_at")[:1000]
    found = list(pending.values_list("pk", "event"))
    for pk, event in found:
        async_task(EFFECT_TASKS[event], pk)
    if found:
        logger.warning("%d deliveries still pending after %s: their effect is queued again", len(found), PENDING_STALE)
    return len(found)


def delivery_done(*, delivery_pk: int) -> None:
    """The effect of a pending delivery has been carried out (or handed to its own retry schedule)."""
    Delivery.objects.filter(pk=delivery_pk, pending=True).update(pending=False)


def push_is_relayed(*, payload: dict[str, Any]) -> bool:
    """Pushes to the default branch and ``ciflow/...`` tags are relayed; deletions and other refs are not."""
    if payload.get("deleted"):
        return False
    ref = payload.get("ref") or ""
    default_branch = (payload.get("repository") or {}).get("default_branch") or "main"
    return ref == f"refs/heads/{default_branch}" or ref.startswith("refs/tags/ciflow/")


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
    # Deliveries can arrive out of order; an older one must not roll back labels, head or state. GitHub's updated_at
    # has whole seconds: two label changes in one second carry the same time, and each payload's list may lack the
    # other's label, so at a tie a labeled/unlabeled delivery applies its own label as a change to the stored list.
    if not created and pr.updated_at <= updated_at:
        label = (payload.get("label") or {}).get("name")
        if pr.updated_at == updated_at and payload.get("action") in ("labeled", "unlabeled") and label:
            labels = [name for name in pr.labels if name != label]
            fields["labels"] = labels + [label] if payload["action"] == "labeled" else labels
        for name, value in fields.items():
            setattr(pr, name, value)
        pr.save()
    # Whether a job of the PR gets a check run is decided from this row when it reports (relay.github.check_runs): a
    # closed PR, or one whose label is gone, gets no new ones.
    return pr


def _pull_request_state(data: dict[str, Any]) -> str:
    if data.get("merged"):
        return PullRequest.State.MERGED
    return PullRequest.State.CLOSED if data.get("state") == "closed" else PullRequest.State.OPEN


def _dispatches_create(delivery: Delivery) -> int:
    """Insert one pending Dispatch per enabled backend that takes this event; returns how many."""
    # Filtered in Python: JSONField "contains" is not available on SQLite, the embedded default.
    backends = Backend.objects.filter(enabled=True).values_list("pk", "events")
    ids = [pk for pk, events in backends if delivery.event in (events or [])]
    if not ids:
        return 0
    # One INSERT … SELECT whatever the number of backends (PostgreSQL and SQLite alike): bulk_create spends about
    # 0.1 ms of Python per row, which would make the webhook's answer time grow with the allowlist.
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    marks = ", ".join(["%s"] * len(ids))
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {Dispatch._meta.db_table}
                (delivery_id, backend_id, status, attempts, last_error, payload_trimmed, created_at, updated_at)
                SELECT %s, id, %s, 0, '', %s, %s, %s FROM {Backend._meta.db_table} WHERE id IN ({marks})""",
            [delivery.pk, Dispatch.Status.PENDING.value, False, now, now, *ids],
        )
    return len(ids)


def _label_adds_check_runs(payload: dict[str, Any], pr: PullRequest) -> bool:
    """Whether this delivery adds a ``ciflow/oot/<device>`` label to an open PR: jobs that already reported then get
    their check runs from the stored results (the backfill), without re-running anything."""
    label = ((payload.get("label") or {}).get("name") or "").strip()
    return payload.get("action") == "labeled" and label.startswith(levels.L3_LABEL_PREFIX) and pr.wants_check_runs


def _delivery_enqueue(delivery: Delivery, body: bytes | None, dispatches: int) -> None:
    """Queue a committed delivery's tasks. Each enqueue stands alone: one that fails (broker down) is logged and left
    to its schedule, and the webhook's answer does not wait for, or fail with, the broker."""
    jobs = []
    if dispatches:
        jobs.append(("relay.tasks.delivery_dispatches_send", delivery.pk))
    if delivery.pending:
        jobs.append((EFFECT_TASKS[delivery.event], delivery.pk))
    if settings.ARCHIVE_URL and body is not None:
        # The raw bytes travel with the task: the stored JSON is re-encoded and would not match the signature.
        jobs.append(("relay.tasks.delivery_archive", delivery.pk, body))
    for task, *args in jobs:
        try:
            async_task(task, *args)
        except Exception as e:  # one line, not a traceback: during a broker outage every webhook comes here
            logger.error("could not queue %s for delivery %s (%r); its schedule will", task, delivery.delivery_id, e)
