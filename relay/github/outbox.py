"""The dispatch outbox: each Dispatch row is one repository_dispatch to one backend, sent by the task worker.

A delivery's Dispatch rows are written with the Delivery (relay.endpoints.intake); this module sends them, at least once
and never twice while a claim holds: a conditional UPDATE claims the rows, every later write is fenced on the claim's
``updated_at`` stamp, and a row left pending (task lost, worker killed, broker down) is sent again by the
``relay: resend stale dispatches`` schedule. A task stops taking work before the task timeout
(``Q_CLUSTER["timeout"]``) could kill it mid-request, and leaves the rest to a continuation task.

A fan-out is one thread that owns the rows (claims, writes, retry timing, on the task's one database connection) and
up to DISPATCH_CONCURRENCY sending threads that only talk to GitHub: a send starts as soon as its claim is committed,
and what GitHub answered is written in batches that never hold a send up.
"""

import heapq
import json
import logging
import random
import time
from collections import Counter, deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from django_q.tasks import async_task

from ootci.models import BISECT_EVENT, Delivery, Dispatch
from relay.endpoints.tokens import callback_token_issue
from relay.github import client as github
from relay.reliability import archive

logger = logging.getLogger(__name__)

# GitHub's limit on a repository_dispatch client_payload is 64 KB; stay a little under it.
CLIENT_PAYLOAD_LIMIT = 64_000
# Free-text fields of webhook payloads (PR body, commit messages, descriptions) that may be cut to fit.
FREE_TEXT_KEYS = frozenset({"body", "message", "description"})

TRIM_MARK = "… [trimmed by OOT CI]"


def delivery_dispatches_send(*, delivery_pk: int) -> dict[str, int]:
    """Send every pending dispatch of a delivery, concurrently."""
    pending = Dispatch.objects.filter(delivery_id=delivery_pk, status=Dispatch.Status.PENDING)
    return dispatches_send(dispatch_ids=list(pending.values_list("pk", flat=True)))


def task_deadline() -> float:
    """The monotonic time after which a task started now starts no GitHub request: one started later could still be
    waiting for GitHub (GITHUB_TIMEOUT_SECONDS, and a retry of it) when the worker kills the task at its timeout."""
    return time.monotonic() + settings.Q_CLUSTER["timeout"] - 2 * settings.GITHUB_TIMEOUT_SECONDS


@dataclass
class _Send:
    """A claimed dispatch on its way to GitHub."""

    dispatch: Dispatch
    stamp: datetime  # the ``updated_at`` of our claim: every write to the row is fenced on it
    budget: int  # tries in this round: after a wait, one per round (the schedule spaces them, not the task)
    failures: int = 0
    client_payload: dict[str, Any] | None = None  # made by the first try's sending thread
    trimmed: bool = False


def dispatches_send(*, dispatch_ids: list[int], deadline: float | None = None) -> dict[str, int]:
    """Send dispatches, up to DISPATCH_CONCURRENCY at once: GitHub's latency, not our CPU, bounds a fan-out.

    Each dispatch is claimed by a conditional UPDATE (only a pending row that is new, stale or due for its retry), and
    every later write is fenced on the ``updated_at`` stamp of the claim, so two workers never both send. Every try
    counts in ``attempts``. A 4xx that is not a rate limit fails it at once; a round of DISPATCH_MAX_ATTEMPTS 5xx or
    timeouts (one try once it has waited), a long rate limit, or a retry that would start after ``deadline`` leaves it
    pending with ``retry_at`` for the schedule, so that a task never sleeps long nor is killed mid-request, and a
    GitHub outage fails nothing until DISPATCH_RETRY_WINDOW_HOURS have passed. A crash between GitHub's answer and our
    write means one resend after DISPATCH_STALE_SECONDS: GitHub has no idempotency key for dispatches, so delivery is
    at least once.

    Returns how many ended sent, failed, pending (left for the schedule), skipped (claimed elsewhere), error (crashed:
    left claimed, for the schedule) or continued (not claimed before the deadline: handed to a new task, which claims
    them as this one would have).
    """
    if not dispatch_ids:
        return {}
    deadline = deadline if deadline is not None else task_deadline()
    todo = deque(dispatch_ids)
    width = min(settings.DISPATCH_CONCURRENCY, len(dispatch_ids))
    outcomes: Counter[str] = Counter()
    waiting: list[tuple[float, int, _Send]] = []  # retries, soonest first
    in_flight: dict[Future, _Send] = {}
    with ThreadPoolExecutor(max_workers=width, thread_name_prefix="dispatch") as senders:
        while todo or waiting or in_flight:
            for send in _retries_due(waiting, outcomes):
                in_flight[senders.submit(_send, send)] = send
            room = width - len(in_flight)
            if todo and room > 0 and time.monotonic() < deadline:
                batch = [todo.popleft() for _ in range(min(room, len(todo)))]
                for send in _dispatches_claim(batch, outcomes):
                    in_flight[senders.submit(_send, send)] = send
                continue
            if not in_flight and not waiting:
                break  # the rest of todo comes after the deadline
            timeout = max(0.0, waiting[0][0] - time.monotonic()) if waiting else None
            if not in_flight:
                time.sleep(timeout or 0.0)  # wait() on no future would return at once
                continue
            done, _ = wait(list(in_flight), timeout=timeout, return_when=FIRST_COMPLETED)
            _answers_record([(in_flight.pop(future), future) for future in done], waiting, deadline, outcomes)
    if todo:
        outcomes["continued"] = len(todo)
        _dispatches_continue(list(todo))
    return {outcome: count for outcome, count in outcomes.items() if count}


def dispatch_send(*, dispatch_id: int, deadline: float | None = None) -> str:
    """Send one repository_dispatch, retrying failures (``dispatches_send``); safe to run twice or concurrently."""
    [(outcome, _)] = dispatches_send(dispatch_ids=[dispatch_id], deadline=deadline).items()
    return outcome


def dispatch_client_payload(*, dispatch: Dispatch) -> tuple[dict[str, Any], bool]:
    """The client_payload of DESIGN §4, and whether free text had to be trimmed to fit GitHub's limit."""
    delivery = dispatch.delivery
    client_payload = {
        "event_type": delivery.event,
        "delivery_id": delivery.delivery_id,
        "payload": delivery.payload,
        "callback_token": callback_token_issue(delivery_id=delivery.delivery_id, repo=dispatch.backend.repo),
    }
    if delivery.event == BISECT_EVENT:  # the upstream commit a bisection step tests (README "Breaks")
        client_payload["sha"] = delivery.head_sha
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
    """Send pending dispatches nobody has touched for DISPATCH_STALE_SECONDS (task lost, worker killed), and those
    whose ``retry_at`` has come."""
    ids = list(
        Dispatch.objects.filter(_claimable(timezone.now()), status=Dispatch.Status.PENDING)
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
            status=Dispatch.Status.PENDING, attempts=0, retry_at=None, updated_at=timezone.now()
        )
        for pk in ids:
            # A lost enqueue (broker down) leaves the row pending, for the stale-dispatch schedule.
            transaction.on_commit(lambda pk=pk: async_task("relay.tasks.dispatch_send", pk), robust=True)
    return len(ids)


def delivery_archive(*, delivery_pk: int, body: bytes) -> str:
    """Archive the raw body of a delivery; returns the key. Failing here never touches the delivery."""
    delivery = Delivery.objects.get(pk=delivery_pk)
    if delivery.archive_key:
        return delivery.archive_key
    key = archive.archive_put(received_at=delivery.received_at, delivery_id=delivery.delivery_id, body=body)
    Delivery.objects.filter(pk=delivery_pk).update(archive_key=key)
    return key


def _dispatches_claim(dispatch_ids: list[int], outcomes: Counter[str]) -> list[_Send]:
    """Claim what of ``dispatch_ids`` no other worker holds: one UPDATE, then the claimed rows and their deliveries
    (one payload per delivery, not one per row)."""
    now = timezone.now()
    claimable = Q(attempts=0, retry_at__isnull=True) | _claimable(now)
    Dispatch.objects.filter(claimable, pk__in=dispatch_ids, status=Dispatch.Status.PENDING).update(
        attempts=F("attempts") + 1, updated_at=now
    )
    # The rows stamped with this claim's time are ours: a row another worker claimed first matched no longer.
    ours = Dispatch.objects.filter(pk__in=dispatch_ids, status=Dispatch.Status.PENDING, updated_at=now)
    dispatches = list(ours.select_related("backend").order_by("pk"))
    deliveries = Delivery.objects.in_bulk({d.delivery_id for d in dispatches})
    outcomes["skipped"] += len(dispatch_ids) - len(dispatches)
    for dispatch in dispatches:
        dispatch.delivery = deliveries[dispatch.delivery_id]
    return [_Send(d, now, budget=1 if d.retry_at else settings.DISPATCH_MAX_ATTEMPTS) for d in dispatches]


def _send(send: _Send) -> None:
    """A sending thread's work: one try, no database (what GitHub answered is the owning thread's to write). The
    payload is made here, so that the first send starts as soon as the claim is committed."""
    if send.client_payload is None:
        send.client_payload, send.trimmed = dispatch_client_payload(dispatch=send.dispatch)
    github.repository_dispatch_create(
        repo=send.dispatch.backend.repo, event_type=send.dispatch.delivery.event, client_payload=send.client_payload
    )


def _answers_record(
    answered: list[tuple[_Send, Future]], waiting: list[tuple[float, int, _Send]], deadline: float, outcomes: Counter
) -> None:
    """Write what GitHub answered: the sent ones in one UPDATE per batch, a failure as ``_try_failed`` decides."""
    sent = [send for send, future in answered if future.exception() is None]
    for trimmed in {send.trimmed for send in sent}:
        now = timezone.now()
        ids = [send.dispatch.pk for send in sent if send.trimmed == trimmed]
        Dispatch.objects.filter(pk__in=ids).update(
            status=Dispatch.Status.SENT, payload_trimmed=trimmed, retry_at=None, updated_at=now, sent_at=now
        )
    outcomes["sent"] += len(sent)
    for send, future in answered:
        if (error := future.exception()) is not None and (outcome := _try_failed(send, error, waiting, deadline)):
            outcomes[outcome] += 1


def _try_failed(send: _Send, e: BaseException, waiting: list[tuple[float, int, _Send]], deadline: float) -> str | None:
    """After a failed try: the dispatch's outcome, or None when its next try is queued in ``waiting``."""
    dispatch = send.dispatch
    if isinstance(e, github.RateLimited):
        if e.wait_seconds > settings.DISPATCH_RATE_LIMIT_MAX_WAIT_SECONDS:
            return _dispatch_defer(dispatch, send.stamp, wait=e.wait_seconds, reason=str(e))
        wait_seconds = e.wait_seconds  # a short rate limit is waited out and not counted as a failure
    elif isinstance(e, github.GitHubError):
        send.failures += 1
        if not e.retryable:
            _dispatch_finish(dispatch.pk, status=Dispatch.Status.FAILED, last_error=str(e), trimmed=send.trimmed)
            logger.warning("dispatch %s to %s failed: %s", dispatch.pk, dispatch.backend.repo, e)
            return "failed"
        if send.failures >= send.budget:
            return _dispatch_defer(dispatch, send.stamp, wait=_later_backoff(dispatch), reason=str(e))
        wait_seconds = _backoff(send.failures)
    else:
        # The row stays claimed and pending: the schedule sends it once the claim is stale.
        logger.error("dispatch %s crashed", dispatch.pk, exc_info=e)
        return "error"
    send.stamp = _dispatch_renew(dispatch.pk, send.stamp, last_error=str(e))
    if send.stamp is None:
        return "skipped"
    if time.monotonic() + wait_seconds > deadline:
        return _dispatch_defer(dispatch, send.stamp, wait=wait_seconds, reason=str(e))
    heapq.heappush(waiting, (time.monotonic() + wait_seconds, dispatch.pk, send))
    return None


def _retries_due(waiting: list[tuple[float, int, _Send]], outcomes: Counter[str]) -> list[_Send]:
    """The retries whose wait is over, each counted as a try (and still ours)."""
    due = []
    while waiting and waiting[0][0] <= time.monotonic():
        send = heapq.heappop(waiting)[2]
        send.stamp = _dispatch_renew(send.dispatch.pk, send.stamp, attempts=F("attempts") + 1)
        if send.stamp is None:
            outcomes["skipped"] += 1
        else:
            due.append(send)
    return due


def _claimable(now: datetime) -> Q:
    """A pending row another worker may take: stale (its worker is gone) and not waiting, or due for its retry and
    not claimed since it was deferred (a claim moves ``updated_at`` past ``retry_at``)."""
    stale = now - timedelta(seconds=settings.DISPATCH_STALE_SECONDS)
    waiting = Q(retry_at__gt=now)
    due = Q(retry_at__lte=now) & Q(updated_at__lt=F("retry_at"))
    return (Q(updated_at__lte=stale) & ~waiting) | due


def _dispatch_defer(dispatch: Dispatch, stamp: datetime, *, wait: float, reason: str) -> str:
    """Leave a claimed dispatch pending until ``wait`` seconds from now, for the schedule; or, once the retry window
    since its webhook has passed, fail it with the reason."""
    now = timezone.now()
    give_up = dispatch.created_at + timedelta(hours=settings.DISPATCH_RETRY_WINDOW_HOURS)
    if now >= give_up:
        hours = settings.DISPATCH_RETRY_WINDOW_HOURS
        ours = Dispatch.objects.filter(pk=dispatch.pk, status=Dispatch.Status.PENDING, updated_at=stamp)
        last_error = f"{reason} (retried for {hours:g} h)"
        failed = ours.update(status=Dispatch.Status.FAILED, retry_at=None, updated_at=now, last_error=last_error)
        logger.warning("dispatch %s to %s failed after %g h: %s", dispatch.pk, dispatch.backend.repo, hours, reason)
        return "failed" if failed else "skipped"
    retry_at = min(now + timedelta(seconds=wait), give_up)  # the last try comes when the window closes
    kept = _dispatch_renew(dispatch.pk, stamp, retry_at=retry_at, last_error=f"{reason}; tried again later")
    return "pending" if kept else "skipped"


def _dispatch_renew(dispatch_id: int, stamp: datetime, **fields: Any) -> datetime | None:
    """Write to a row we claimed, keeping the claim fresh; None when another worker has taken it over."""
    now = timezone.now()
    kept = Dispatch.objects.filter(pk=dispatch_id, status=Dispatch.Status.PENDING, updated_at=stamp).update(
        updated_at=now, **fields
    )
    return now if kept else None


def _dispatch_finish(dispatch_id: int, *, status: str, trimmed: bool, last_error: str | None = None) -> None:
    now = timezone.now()
    fields: dict[str, Any] = {"status": status, "payload_trimmed": trimmed, "retry_at": None, "updated_at": now}
    if status == Dispatch.Status.SENT:
        fields["sent_at"] = now
    if last_error is not None:
        fields["last_error"] = last_error
    Dispatch.objects.filter(pk=dispatch_id).update(**fields)


def _dispatches_continue(dispatch_ids: list[int]) -> None:
    try:
        async_task("relay.tasks.dispatches_send", dispatch_ids)
    except Exception:
        # Unclaimed and pending, they are what the stale-dispatch schedule sends.
        logger.exception("could not queue the continuation of %d dispatches", len(dispatch_ids))


def _backoff(failures: int) -> float:
    """Exponential backoff with equal jitter: spread retries of a fan-out that failed at once."""
    ceiling = min(settings.DISPATCH_RETRY_MAX_SECONDS, settings.DISPATCH_RETRY_BASE_SECONDS * 2 ** (failures - 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def _later_backoff(dispatch: Dispatch) -> float:
    """The wait before the next round once a round failed: as long as the dispatch has been failing (so the waits
    double), at least a minute (the schedule's period), at most DISPATCH_RETRY_LATER_MAX_SECONDS; equal jitter."""
    failing = (timezone.now() - dispatch.created_at).total_seconds()
    ceiling = min(settings.DISPATCH_RETRY_LATER_MAX_SECONDS, max(60.0, failing))
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
