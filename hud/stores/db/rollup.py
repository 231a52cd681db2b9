"""Gate figures, and the stats' counts, of a rolling window from the daily roll-up the database keeps (PostgreSQL only,
migrations ootci 0040 and 0042): the window's whole days from ``ootci_jobday``, its first, partial day from the job
results.

A window starting at ``S``, on the UTC day ``D``, has as latest attempts those with ``finished_at >= S`` and
``newer_finished_at`` empty or before ``S`` (``hud.stores.db.jobs.latest_sql``). Split by day:

- an attempt that finished after ``D`` and whose newer attempts finished before ``D`` (or none) is one: the roll-up's
  rows with ``day > D`` and ``newer_day`` empty or ``< D``;
- one that finished on ``D`` is one when it finished at or after ``S`` and its newer attempts before ``S``: read from
  the job results by the covering index of 0039 (a day of the window's rows, not all of them);
- one that finished after ``D`` whose newer attempts finished on ``D`` is one when they finished before ``S``: read by
  the small index of 0041 (such attempts are few);
- any other is none: it finished before ``S``, or its newer attempts finished after ``D``, or on ``D`` after it.

The sums are the counts over the latest attempts exactly; the averages are sums of ``numeric`` over counts, within a
millionth of a second of ``AVG`` over the rows (tests/hud/stores/test_rollup.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

from ootci.gates import OVERRUN_HOURS

# As hud.stores.base's (tests/hud/stores/test_rollup.py holds them equal); not imported, to keep the import chain short.
COUNTED = "outcome IN ('success', 'test', 'infra')"
OVERRUN_SECONDS = float(OVERRUN_HOURS * 3600)

# A latest attempt's contribution to each roll-up column (migrations ootci 0042 and 0043 keep the same sums).
ATTEMPT = {
    "ok": "CASE WHEN outcome = 'success' THEN 1 ELSE 0 END",
    "total": f"CASE WHEN {COUNTED} THEN 1 ELSE 0 END",
    "seen": "1",
    "test": "CASE WHEN outcome = 'test' THEN 1 ELSE 0 END",
    "running": "CASE WHEN outcome = 'running' THEN 1 ELSE 0 END",
    "timed_out": "CASE WHEN outcome = 'infra' AND conclusion = 'timed_out' THEN 1 ELSE 0 END",
    "overruns": f"CASE WHEN {COUNTED} AND execution_time > {OVERRUN_SECONDS} THEN 1 ELSE 0 END",
    "queue_sum": "COALESCE(CAST(queue_time AS numeric), 0)",
    "queue_n": "CASE WHEN queue_time IS NULL THEN 0 ELSE 1 END",
    "dependency_sum": "COALESCE(CAST(dependency_wait AS numeric), 0)",
    "dependency_n": "CASE WHEN dependency_wait IS NULL THEN 0 ELSE 1 END",
    "execution_sum": "COALESCE(CAST(execution_time AS numeric), 0)",
    "execution_n": "CASE WHEN execution_time IS NULL THEN 0 ELSE 1 END",
}


def edge_params(windows: dict[str, tuple[str, datetime]]) -> dict:
    """Per window ``w``: ``w_midnight`` and ``w_next``, the start of its first UTC day and of the day after."""
    params = {}
    for name, (_, since) in windows.items():
        midnight = datetime.combine(since.astimezone(UTC).date(), time.min, tzinfo=UTC)
        params[f"{name}_midnight"], params[f"{name}_next"] = midnight, midnight + timedelta(days=1)
    return params


def gates_parts(w: str, *, backend: bool) -> str:
    """The rows whose sums are window ``w``'s gate figures: roll-up rows of its whole days, and the latest attempts
    of its first day (see the module docstring)."""
    raw = ", ".join(f"{value} AS {column}" for column, value in ATTEMPT.items())
    return parts(w, backend=backend, table="ootci_jobday", rolled=", ".join(ATTEMPT), raw=raw)


def parts(w: str, *, backend: bool, table: str, rolled: str, raw: str, joined: str = "") -> str:
    """Window ``w``'s rows of a day roll-up ``table`` (keyed as ``ootci_jobday``): ``backend_id`` and the columns
    ``rolled`` of its rows of whole days, then ``backend_id`` and ``raw`` (the same columns as values of one attempt;
    ``joined`` may add a join to them) of the latest attempts of its first day."""
    mine = " AND backend_id = %(backend_id)s" if backend else ""
    return f"""
        SELECT backend_id, {rolled} FROM {table}
        WHERE event_type = %({w}_event)s AND day > CAST(%({w}_day)s AS date)
          AND (newer_day IS NULL OR newer_day < CAST(%({w}_day)s AS date)){mine}
        UNION ALL
        SELECT backend_id, {raw} FROM ootci_jobresult {joined}
        WHERE event_type = %({w}_event)s AND finished_at >= %({w}_since)s AND finished_at < %({w}_next)s
          AND (newer_finished_at IS NULL OR newer_finished_at < %({w}_since)s)
          AND (newer_finished_at IS NULL OR newer_finished_at < finished_at){mine}
        UNION ALL
        SELECT backend_id, {raw} FROM ootci_jobresult {joined}
        WHERE event_type = %({w}_event)s AND newer_finished_at >= %({w}_midnight)s
          AND newer_finished_at < %({w}_since)s AND newer_finished_at < finished_at
          AND finished_at >= %({w}_next)s{mine}"""


def average(column: str) -> str:
    return f"CAST(SUM({column}_sum) / NULLIF(SUM({column}_n), 0) AS double precision)"


# The gates figure row's columns (hud.stores.base.FIGURE_COLUMNS) as sums of the parts.
GATES = {
    "backend_id": "backend_id",
    "successes": "CAST(SUM(ok) AS bigint)",
    "test_failures": "CAST(SUM(test) AS bigint)",
    "infra_failures": "CAST(SUM(total - ok - test) AS bigint)",
    "running": "CAST(SUM(running) AS bigint)",
    "skipped": "CAST(SUM(seen - total - running) AS bigint)",
    "timed_out": "CAST(SUM(timed_out) AS bigint)",
    "overruns": "CAST(SUM(overruns) AS bigint)",
    "queue_avg": average("queue"),
    "dependency_avg": average("dependency"),
}
# What the stats read of the roll-up (hud.stores.db.stats).
STATS = ("successes", "test_failures", "infra_failures", "running", "skipped", "timed_out", "queue_avg")
