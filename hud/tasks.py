"""django-q2 tasks of the HUD: thin, argument-free or id-taking, and safe to run twice."""

from django_q.tasks import async_task

from hud.figures import queries
from hud.stores.clickhouse import connection as clickhouse
from hud.stores.clickhouse import copy_cases, copy_jobs
from hud.web import params


def clickhouse_replicate() -> int:
    """Copy changed job results, then the cases of newly parsed test reports, to ClickHouse (every minute, and after
    writes); a no-op when not configured.

    Raises ClickHouseError when ClickHouse is down, so the failure shows in the task list; the cursor has
    not moved past anything unsent, and the next run catches up.
    """
    if not clickhouse.is_configured():
        return 0
    return copy_jobs.replicate() + copy_cases.replicate()


def clickhouse_replicate_soon() -> None:
    """Enqueue one replication run (``ootci.replication`` calls this after job-result writes)."""
    async_task("hud.tasks.clickhouse_replicate", task_name="clickhouse_replicate")


def figures_refresh() -> None:
    """Recompute the figures the HUD pages show by default and cache them (every minute; see queries.cached)."""
    queries.figures_refresh(days=params.DAYS, metric_days=params.METRIC_DAYS)
