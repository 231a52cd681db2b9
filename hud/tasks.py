"""django-q2 tasks of the HUD: thin, argument-free or id-taking, and safe to run twice."""

from hud import clickhouse


def clickhouse_replicate() -> int:
    """Copy changed job results to ClickHouse (every minute, and after writes); a no-op when not configured.

    Raises ClickHouseError when ClickHouse is down, so the failure shows in the task list; the cursor has
    not moved past anything unsent, and the next run catches up.
    """
    if not clickhouse.is_configured():
        return 0
    return clickhouse.replicate()
