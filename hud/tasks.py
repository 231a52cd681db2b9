"""django-q2 tasks of the HUD: thin, argument-free or id-taking, and safe to run twice."""

from hud import clickhouse, queries


def clickhouse_replicate() -> int:
    """Copy changed job results to ClickHouse (every minute, and after writes); a no-op when not configured.

    Raises ClickHouseError when ClickHouse is down, so the failure shows in the task list; the cursor has
    not moved past anything unsent, and the next run catches up.
    """
    if not clickhouse.is_configured():
        return 0
    return clickhouse.replicate()


def figure_refresh(name: str, key: tuple, answering: str) -> None:
    """Recompute one cached HUD figure that a page found stale (enqueued once per figure; see queries.cached)."""
    queries.figure_refresh(name=name, key=key, answering=answering)
