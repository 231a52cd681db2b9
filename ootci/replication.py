"""The write side's hook into ClickHouse replication, so that writers of JobResult need not import hud.

Call `job_results_changed()` after creating or updating JobResult rows (inside the transaction or not).
When CLICKHOUSE_URL is set it enqueues `hud.tasks.clickhouse_replicate` once the transaction commits;
a burst of writes enqueues one task, as the flag below stays up until that task starts reading.

Replication follows `JobResult.updated_at`: a write that skips `save()` (`QuerySet.update`,
`bulk_update`) must set `updated_at=timezone.now()` itself or the change is never copied.
"""

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django_q.tasks import async_task

PENDING_KEY = "ootci:clickhouse-replication-pending"
# If the enqueued task is lost, the flag expires and the every-minute schedule covers the gap.
PENDING_TIMEOUT = 120


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
    if cache.add(PENDING_KEY, 1, timeout=PENDING_TIMEOUT):
        async_task("hud.tasks.clickhouse_replicate", task_name="clickhouse_replicate")
