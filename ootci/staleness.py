"""Silent backends: a backend that stops reporting must not read as healthy ("no rows means no failures").

Each backend has a cadence per event (``Backend.nightly_cadence_minutes``, ``periodic_cadence_minutes``) and a grace
(``stale_grace_minutes``). It is **silent** when

- its newest nightly (or periodic) result is older than the cadence + grace — once it has reported that event at all,
  or when the event is among the ones relayed to it (then its creation starts the clock);
- or its last PR_UNANSWERED pull-request dispatches, each sent more than the grace ago, got no callback at all.

It is said on the HUD ("silent for 31 h"), in the ``stale_results`` incident (``relay.alerts.incidents``), and it ends
with the next report. Read by a few queries for any number of backends, and one small one per backend that gets PR
dispatches (its last PR_UNANSWERED, by index).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F, OuterRef, Subquery

from ootci.events import Event
from ootci.models import Backend, Dispatch, JobResult

PR_UNANSWERED = 5


@dataclass(frozen=True)
class Silence:
    backend_id: int
    event: str
    since: datetime  # its newest result of that event (or the first unanswered dispatch, or its creation)
    unanswered: int = 0  # PR dispatches without a callback (event pull_request)

    def hours(self, now: datetime) -> int:
        return int((now - self.since).total_seconds() // 3600)

    def text(self, now: datetime) -> str:
        if self.event == Event.PULL_REQUEST:
            return f"silent: its last {self.unanswered} PR dispatches got no callback"
        return f"silent for {self.hours(now)} h (no {self.event} result)"


def silences(backends: list[Backend], *, now: datetime) -> dict[int, Silence]:
    """The silent backends among ``backends`` (enabled ones), by id: the longest silence of each."""
    backends = [b for b in backends if b.enabled]
    if not backends:
        return {}
    ids = [b.pk for b in backends]
    # Each backend's newest result of each event, one index probe each (job_backend_event_time, read backwards): an
    # aggregate over the backends' results read every nightly and periodic one (50 ms at 1,000,000 job results).
    events = (Event.NIGHTLY, Event.PERIODIC)
    newest_of = {
        event: Subquery(
            JobResult.objects.filter(backend_id=OuterRef("pk"), event_type=event)
            .order_by("-created_at")
            .values("created_at")[:1]
        )
        for event in events
    }
    newest = {
        (r["pk"], event): r[event]
        for r in Backend.objects.filter(pk__in=ids).annotate(**newest_of).values("pk", *events)
        for event in events
        if r[event] is not None
    }
    found: dict[int, Silence] = {}
    for b in backends:
        grace = timedelta(minutes=b.stale_grace_minutes)
        for event, cadence in (
            (Event.NIGHTLY, b.nightly_cadence_minutes),
            (Event.PERIODIC, b.periodic_cadence_minutes),
        ):
            last = newest.get((b.pk, event))
            if not cadence or (last is None and event not in (b.events or [])):
                continue  # never reported it, nor is it relayed to it: nothing is expected
            since = last or b.created_at
            if now - since > timedelta(minutes=cadence) + grace:
                found.setdefault(b.pk, Silence(b.pk, event, since))
    waiting = [b for b in backends if b.pk not in found and Event.PULL_REQUEST in (b.events or [])]
    found |= _unanswered(waiting, now=now)
    return found


def _unanswered(backends: list[Backend], *, now: datetime) -> dict[int, Silence]:
    """Backends whose last PR_UNANSWERED sent pull-request dispatches (each older than their grace) got no callback:
    each backend's last ones by its newest dispatches (the dispatch table's backend and creation index, read backwards),
    then one query for their callbacks. Numbering every sent PR dispatch by backend took 25–35 ms at 20,000."""
    if not backends:
        return {}
    newest = [F("created_at").desc(), F("id").desc()]
    last = [
        row
        for b in backends
        for row in Dispatch.objects.filter(
            backend_id=b.pk,
            created_at__lte=now - timedelta(minutes=b.stale_grace_minutes),
            status=Dispatch.Status.SENT,
            delivery__event=Event.PULL_REQUEST,
        )
        .order_by(*newest)
        .values_list("pk", "backend_id", "created_at")[:PR_UNANSWERED]
    ]
    answered = set(
        JobResult.objects.filter(dispatch_id__in=[pk for pk, _, _ in last]).values_list("dispatch_id", flat=True)
    )
    by_backend: dict[int, list[tuple[int, datetime]]] = {}
    for pk, backend_id, at in last:
        by_backend.setdefault(backend_id, []).append((pk, at))
    return {
        bid: Silence(bid, Event.PULL_REQUEST, min(at for _, at in sent), unanswered=len(sent))
        for bid, sent in by_backend.items()
        if len(sent) == PR_UNANSWERED and not any(pk in answered for pk, _ in sent)
    }
