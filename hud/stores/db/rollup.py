"""Gate figures, and the stats' counts, of a rolling window from the daily roll-up the database keeps (PostgreSQL only,
migrations ootci 0040 and 0042): the window's whole days from ``ootci_jobday``, the part of its first day that is
not whole from the job results.

A window starting at ``S``, on the UTC day ``D`` (midnight ``D``, next midnight ``N``), has as latest attempts ``L(S)``
those with ``finished_at >= S`` and ``newer_finished_at`` empty or before ``S`` (``hud.stores.db.jobs.latest_sql``).
The roll-up's rows of the days from ``D`` with ``newer_day`` empty or before ``D`` are exactly ``L(D)``, those of the
days after ``D`` exactly ``L(N)`` less the attempts whose newer ones finished on ``D``. Whichever of ``[D, S)`` and
``[S, N)`` is shorter is read from the job results, so a window never reads more than half a day of them:

- ``S`` in the second half of its day (forward): the roll-up's rows of the days after ``D``; plus the attempts that
  finished in ``[S, N)`` whose newer attempts finished before ``S`` (the covering index of 0039); plus those that
  finished from ``N`` whose newer attempts finished in ``[D, S)`` (the small index of 0041: such attempts are few).
- ``S`` in the first half (backward): the roll-up's rows of the days from ``D``, that is ``L(D)``; less the attempts
  of ``L(D)`` that finished before ``S``, those that finished in ``[D, S)`` with newer attempts before ``D`` (0039's
  index); plus the attempts of ``L(S)`` not in ``L(D)``, those that finished from ``S`` whose newer attempts
  finished in ``[D, S)`` (0041's index).

So every figure is a sum over parts, some subtracted (``sign`` -1), and stays exact: counts are exact; the averages
are sums of ``numeric`` over counts, within a millionth of a second of ``AVG`` over the rows
(tests/hud/stores/test_rollup.py, with window starts at random times of day, at each half's edge, and at and just
after a newer attempt's finish).
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
    """Per window ``w`` starting at ``S`` on the UTC day from midnight ``D`` to ``N`` (module docstring):

    - ``w_whole``: the first day whose roll-up rows are summed (``D`` backward, ``N`` forward);
    - ``w_lo``, ``w_hi``, ``w_cut``, ``w_sign``: the attempts read from the job results, which finished in
      ``[lo, hi)`` with newer attempts before ``cut``, added (1) or subtracted (-1);
    - ``w_midnight``, ``w_late``: the attempts added whose newer attempts finished in ``[D, S)`` and which finished
      from ``late``.
    """
    params = {}
    for name, (_, since) in windows.items():
        midnight = datetime.combine(since.astimezone(UTC).date(), time.min, tzinfo=UTC)
        following = midnight + timedelta(days=1)
        if since - midnight < following - since:
            whole, lo, hi, cut, sign, late = midnight, midnight, since, midnight, -1, since
        else:
            whole, lo, hi, cut, sign, late = following, since, following, since, 1, following
        edges = {"whole": whole.date(), "lo": lo, "hi": hi, "cut": cut, "sign": sign, "late": late}
        params |= {f"{name}_{key}": value for key, value in edges.items()} | {f"{name}_midnight": midnight}
    return params


def gates_parts(w: str, *, backend: bool) -> str:
    """The rows whose sums are window ``w``'s gate figures: roll-up rows of its whole days, and the latest attempts
    of its first day read from the job results (see the module docstring)."""
    return parts(w, backend=backend, table="ootci_jobday", summed=ATTEMPT)


def parts(
    w: str, *, backend: bool, table: str, summed: dict[str, str], keyed: dict[str, str] | None = None, joined: str = ""
) -> str:
    """Window ``w``'s rows of a day roll-up ``table`` (keyed as ``ootci_jobday``), then those of the job results that
    complete them (module docstring): ``backend_id``, the columns ``keyed`` (grouping keys, such as a bucket) and the
    columns ``summed``, each given as the value of one attempt (``joined`` may add a join to them); a subtracted
    attempt's ``summed`` values are negated."""
    keyed = keyed or {}
    rolled = ", ".join([*keyed, *summed])
    plain = ", ".join([*keyed.values(), *summed.values()])
    signed = ", ".join([*keyed.values(), *(f"%({w}_sign)s * ({value})" for value in summed.values())])
    mine = " AND backend_id = %(backend_id)s" if backend else ""
    return f"""
        SELECT backend_id, {rolled} FROM {table}
        WHERE event_type = %({w}_event)s AND day >= CAST(%({w}_whole)s AS date)
          AND (newer_day IS NULL OR newer_day < CAST(%({w}_day)s AS date)){mine}
        UNION ALL
        SELECT backend_id, {signed} FROM ootci_jobresult {joined}
        WHERE event_type = %({w}_event)s AND finished_at >= %({w}_lo)s AND finished_at < %({w}_hi)s
          AND (newer_finished_at IS NULL OR newer_finished_at < %({w}_cut)s)
          AND (newer_finished_at IS NULL OR newer_finished_at < finished_at){mine}
        UNION ALL
        SELECT backend_id, {plain} FROM ootci_jobresult {joined}
        WHERE event_type = %({w}_event)s AND newer_finished_at >= %({w}_midnight)s
          AND newer_finished_at < %({w}_since)s AND newer_finished_at < finished_at
          AND finished_at >= %({w}_late)s{mine}"""


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
