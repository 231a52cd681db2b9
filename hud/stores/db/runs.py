"""Run times of rolling windows on PostgreSQL, from what the database keeps (migration ootci 0045) instead of a grouping
and a sort of the window's latest attempts (at 1,000,000 job results the 14-day window's 300,000 rows, 250,000 runs).

A run is one upstream event's jobs on a backend (backend, event, PR, tested SHA); its time runs from the earliest start
(else report time) to the last finish of its jobs' newest attempts that are not running, and it counts in a window
when that last finish is in it (``hud.figures.queries``). ``ootci_jobrun`` keeps each run's time and its bucket
(``ootci_time_bucket``), so a window's p50 and p90 per backend, exact as ``percentile_cont``, are:

- how many of its runs each bucket holds (``ootci_jobrunday``'s counts by day, and the runs of the shorter part of its
  first day by last finish, 0045's index, added or subtracted as in ``hud.stores.db.rollup``), so which bucket holds
  a rank;
- that bucket's runs of the window alone (0045's index by backend, bucket and last finish), sorted, at the rank's place:
  the values at ranks ⌊p(n−1)⌋ and ⌈p(n−1)⌉, interpolated as PostgreSQL does.

tests/hud/stores/test_runs.py holds them to the runs of the newest attempts on random histories, and the table to a
recount.
"""

from __future__ import annotations

from hud.stores.db import percentiles

PERCENTILES = {"p50": 0.5, "p90": 0.9}


def runs_ctes(asks, *, backend: bool) -> str:
    """The CTEs (``, name AS (…)``) of the run times of each window asked for: ``runs_w`` has backend_id, p50 and p90
    of every backend with a run in window ``w``."""
    return "".join(ctes(w, backend=backend) for kind, w in asks if kind == "run")


def ctes(w: str, *, backend: bool) -> str:
    mine = f"r.event_type = %({w}_event)s AND r.last_at >= %({w}_since)s"
    if backend:
        mine += " AND r.backend_id = %(backend_id)s"
    # Per backend and bucket: how many runs it holds, how many lie below it, how many there are. The counts are the
    # roll-up's days from the window's first or second, and the runs of the shorter part of its first day, subtracted
    # or added (``hud.stores.db.rollup.edge_params``: never more than half a day of runs).
    days = f"r.event_type = %({w}_event)s AND r.day >= CAST(%({w}_whole)s AS date)"
    first = f"r.event_type = %({w}_event)s AND r.last_at >= %({w}_lo)s AND r.last_at < %({w}_hi)s"
    if backend:
        days += " AND r.backend_id = %(backend_id)s"
        first += " AND r.backend_id = %(backend_id)s"
    counted = f"""
        SELECT backend_id, bucket, n, SUM(n) OVER upto - n AS below, SUM(n) OVER all_ AS total FROM (
            SELECT backend_id, bucket, CAST(SUM(n) AS bigint) AS n FROM (
                SELECT r.backend_id, r.bucket, r.runs AS n FROM ootci_jobrunday r WHERE {days}
                UNION ALL
                SELECT r.backend_id, r.bucket, %({w}_sign)s FROM ootci_jobrun r WHERE {first}) AS parts
            GROUP BY backend_id, bucket HAVING SUM(n) > 0) AS counted
        WINDOW upto AS (PARTITION BY backend_id ORDER BY bucket), all_ AS (PARTITION BY backend_id)"""
    # Each percentile's place p(n - 1) and the ranks on both sides of it, as percentile_cont computes them, with the
    # bucket that holds each rank and the rank's place in it.
    wanted = ", ".join(f"('{name}', CAST({p} AS double precision))" for name, p in PERCENTILES.items())
    picked = f"""
        SELECT c.backend_id, t.name, t.place, r.rank, c.bucket, r.rank - c.below AS at FROM (
            SELECT DISTINCT backend_id, total FROM runcum_{w}) AS b
        CROSS JOIN LATERAL (VALUES {wanted}) AS v (name, p)
        CROSS JOIN LATERAL (SELECT v.name, v.p * CAST(b.total - 1 AS double precision) AS place) AS t
        CROSS JOIN LATERAL (SELECT DISTINCT rank FROM (VALUES (CAST(floor(t.place) AS bigint)),
                                                              (CAST(ceil(t.place) AS bigint))) AS r (rank)) AS r
        JOIN runcum_{w} c ON c.backend_id = b.backend_id AND r.rank >= c.below AND r.rank < c.below + c.n"""
    # One read per bucket holding a rank: its runs of the window, sorted.
    read = f"""
        SELECT b.backend_id, b.bucket, v.sorted FROM (SELECT DISTINCT backend_id, bucket FROM runpick_{w}) AS b
        CROSS JOIN LATERAL (SELECT array_agg(r.seconds ORDER BY r.seconds) AS sorted FROM ootci_jobrun r
            WHERE {mine} AND r.backend_id = b.backend_id AND r.bucket = b.bucket) AS v"""
    valued = percentiles.rank_values(f"runpick_{w}", f"runread_{w}", "backend_id, bucket")
    found = percentiles.interpolated(f"runvalues_{w}", PERCENTILES)
    named = {"runcum": counted, "runpick": picked, "runread": read, "runvalues": valued, "runs": found}
    # Each bucket read once, whichever ranks it holds.
    return "".join(
        f", {name}_{w} AS {'MATERIALIZED ' if name == 'runread' else ''}({sql})" for name, sql in named.items()
    )
