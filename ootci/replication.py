"""The write side's hook into ClickHouse replication, so that writers of JobResult need not import hud.

Call `job_results_changed()` after creating or updating JobResult rows (inside the transaction or not).
When CLICKHOUSE_URL is set it calls the HUD's enqueue function (registered at start-up, :func:`replicate_with`) once
the transaction commits; a burst of writes enqueues one task, as the flag below stays up until that task starts
reading.

Replication follows `JobResult.updated_at`: a write that skips `save()` (`QuerySet.update`,
`bulk_update`) must set `updated_at=timezone.now()` itself or the change is never copied.
"""

from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

PENDING_KEY = "ootci:clickhouse-replication-pending"
# If the enqueued task is lost, the flag expires and the every-minute schedule covers the gap.
PENDING_TIMEOUT = 120
_replicator: dict[str, Callable[[], None]] = {}


def replicate_with(enqueue: Callable[[], None]) -> None:
    """Register the function that enqueues one replication run (the HUD's, when its app is ready)."""
    _replicator["enqueue"] = enqueue


def job_results_changed() -> None:
    """Replicate recent JobResult writes to ClickHouse soon (a no-op without CLICKHOUSE_URL)."""
    if not settings.CLICKHOUSE_URL:
        return
    # Several writes in one transaction register several callbacks; the cache flag makes them enqueue one task. A
    # broker or cache failure loses nothing: the every-minute schedule replicates what a lost task would have.
    transaction.on_commit(_enqueue_once, robust=True)


def replication_started() -> None:
    """Called by the replication run before it reads: later writes must enqueue a new run."""
    cache.delete(PENDING_KEY)


def _enqueue_once() -> None:
    if "enqueue" in _replicator and cache.add(PENDING_KEY, 1, timeout=PENDING_TIMEOUT):
        _replicator["enqueue"]()
