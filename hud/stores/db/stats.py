"""The overview's stats of a rolling window on PostgreSQL, from what the database keeps (migrations ootci 0040–0044)
instead of a sort of the window's latest attempts (at 1,000,000 job results the 30-day window's 620,000 rows).

- Counts, average queue and run times: sums of the daily roll-up ``ootci_jobday`` by day and of the latest attempts of
  the shorter part of the window's first day, added or subtracted (``hud.stores.db.rollup``).
- Percentiles (p50 and p90 of queue time, p50 of run time), exact: the histogram ``ootci_jobtime`` (fixed buckets of
  ``ootci_time_bucket``, by the same days) gives, per backend, how many of the window's values each bucket holds, so
  which bucket holds the value of a rank; the value is read from that bucket's latest attempts of the window alone
  (0044's index by backend, bucket and finish), sorted, at the rank's place in it. ``percentile_cont``: the values at
  ranks ⌊p(n−1)⌋ and ⌈p(n−1)⌉, interpolated as PostgreSQL does.
- Distinct PRs: ``ootci_jobprday`` counts, per day, the PRs whose jobs' newest attempts last finished that day
  (``ootci_jobpr``): its days from the window's first or second, and the PRs of the shorter part of the first day by
  that finish from ``ootci_jobpr``, subtracted or added as the counts are; and a PR whose only latest attempts in the
  window are older attempts whose newer ones finished before the window (a re-run that finished first) is found by
  0044's small index of such attempts.
- Last finish: per backend, the newest latest attempt, read backwards by the covering index from the end of its last
  day with one (from the roll-up).

tests/hud/stores/test_rollup.py holds each to the sort's latest attempts on random histories.
"""

from __future__ import annotations

from hud.stores.db import percentiles, rollup

# What a latest attempt is in window w, on the job results (hud.stores.db.jobs.latest_sql).
LATEST = (
    "j.event_type = %({w}_event)s AND j.finished_at >= %({w}_since)s"
    " AND (j.newer_finished_at IS NULL OR j.newer_finished_at < %({w}_since)s)"
    " AND (j.newer_finished_at IS NULL OR j.newer_finished_at < j.finished_at)"
)
# The percentiles the stats show: column → (measure, p); a measure's values are the job results' column.
PERCENTILES = {"queue_median": ("queue", 0.5), "queue_p90": ("queue", 0.9), "duration_median": ("run", 0.5)}
MEASURES = {"queue": "queue_time", "run": "execution_time"}


def stats_ctes(windows, asks, *, backend: bool) -> str:
    """The CTEs (``, name AS (…)``) of the stats of each window asked for (``stats_select`` reads them)."""
    return "".join(ctes(w, backend=backend) for kind, w in asks if kind == "stats")


def ctes(w: str, *, backend: bool) -> str:
    mine = " AND backend_id = %(backend_id)s" if backend else ""
    latest = LATEST.format(w=w) + (" AND j.backend_id = %(backend_id)s" if backend else "")
    counts = ", ".join(f"{rollup.GATES[c]} AS {c}" for c in rollup.STATS)
    kept = (
        f"SELECT backend_id, {counts}, {rollup.average('execution')} AS duration_avg "
        f"FROM ({rollup.gates_parts(w, backend=backend)}) parts GROUP BY backend_id HAVING SUM(seen) > 0"
    )
    histogram = rollup.parts(
        w,
        backend=backend,
        table="ootci_jobtime",
        keyed={"bucket": "ootci_time_bucket(t.seconds)"},
        summed={"queue_n": "t.queue_n", "run_n": "t.run_n"},
        joined="CROSS JOIN LATERAL (VALUES (queue_time, 1, 0), (execution_time, 0, 1)) AS t (seconds, queue_n, run_n)",
    )
    # Per backend and bucket: how many values it holds, how many lie below it, how many there are.
    below = ", ".join(
        f"CAST(SUM({m}_n) OVER upto - {m}_n AS bigint) AS {m}_below, CAST(SUM({m}_n) OVER mine AS bigint) AS {m}_all"
        for m in MEASURES
    )
    cumulative = (
        f"SELECT backend_id, bucket, queue_n, run_n, {below} FROM (SELECT backend_id, bucket, "
        f"CAST(SUM(queue_n) AS bigint) AS queue_n, CAST(SUM(run_n) AS bigint) AS run_n FROM ({histogram}) AS parts "
        "WHERE bucket IS NOT NULL GROUP BY backend_id, bucket) AS counted "
        "WINDOW upto AS (PARTITION BY backend_id ORDER BY bucket), mine AS (PARTITION BY backend_id)"
    )
    # Each percentile's place p(n - 1) and the ranks on both sides of it, as percentile_cont computes them.
    wanted = ", ".join(f"('{c}', '{m}', CAST({p} AS double precision))" for c, (m, p) in PERCENTILES.items())
    targets = f"""
        SELECT c.backend_id, t.name, t.measure, t.place, r.rank FROM (
            SELECT DISTINCT backend_id, queue_all, run_all FROM cum_{w}) AS c
        CROSS JOIN LATERAL (VALUES {wanted}) AS v (name, measure, p)
        CROSS JOIN LATERAL (SELECT v.name, v.measure, v.p * CAST(
            CASE v.measure WHEN 'queue' THEN c.queue_all ELSE c.run_all END - 1 AS double precision) AS place) AS t
        CROSS JOIN LATERAL (SELECT DISTINCT rank FROM (VALUES (CAST(floor(t.place) AS bigint)),
                                                              (CAST(ceil(t.place) AS bigint))) AS r (rank)) AS r
        WHERE CASE v.measure WHEN 'queue' THEN c.queue_all ELSE c.run_all END > 0"""
    picked = f"""
        SELECT t.*, c.bucket, t.rank - CASE t.measure WHEN 'queue' THEN c.queue_below ELSE c.run_below END AS at
        FROM targets_{w} t JOIN cum_{w} c ON c.backend_id = t.backend_id
         AND t.rank >= CASE t.measure WHEN 'queue' THEN c.queue_below ELSE c.run_below END
         AND t.rank < CASE t.measure WHEN 'queue' THEN c.queue_below + c.queue_n ELSE c.run_below + c.run_n END"""
    # One read per bucket holding a rank: its latest attempts of the window, by 0044's index, sorted.
    buckets = " UNION ALL ".join(
        f"SELECT j.{column} AS seconds FROM ootci_jobresult j WHERE b.measure = '{m}' AND {latest}"
        f" AND j.backend_id = b.backend_id AND ootci_time_bucket(j.{column}) = b.bucket"
        for m, column in MEASURES.items()
    )
    read = f"""
        SELECT b.backend_id, b.measure, b.bucket, v.sorted FROM (SELECT DISTINCT backend_id, measure, bucket
            FROM picked_{w}) AS b
        CROSS JOIN LATERAL (SELECT array_agg(seconds ORDER BY seconds) AS sorted FROM ({buckets}) AS rows_) AS v"""
    valued = percentiles.rank_values(f"picked_{w}", f"read_{w}", "backend_id, measure, bucket")
    found = percentiles.interpolated(f"values_{w}", PERCENTILES)
    prs = f"""
        SELECT backend_id, SUM(n) AS prs FROM (
            SELECT backend_id, prs AS n FROM ootci_jobprday
            WHERE event_type = %({w}_event)s AND day >= CAST(%({w}_whole)s AS date){mine}
            UNION ALL
            SELECT backend_id, %({w}_sign)s * COUNT(*) FROM ootci_jobpr
            WHERE event_type = %({w}_event)s AND last_at >= %({w}_lo)s AND last_at < %({w}_hi)s{mine}
            GROUP BY backend_id
            UNION ALL
            SELECT j.backend_id, COUNT(DISTINCT j.pr_number) FROM ootci_jobresult j
            WHERE {latest} AND j.newer_finished_at < j.finished_at
              AND COALESCE((SELECT p.last_at >= %({w}_since)s FROM ootci_jobpr p WHERE p.backend_id = j.backend_id
                  AND p.event_type = j.event_type AND p.pr_number = j.pr_number), false) = false
            GROUP BY j.backend_id
        ) AS counted GROUP BY backend_id"""
    # A backend's latest attempts of the window finished on or before the last day of its roll-up rows that may
    # hold one (or on the window's first day, where the roll-up leaves some out).
    last_day = f"""
        SELECT k.backend_id, GREATEST(CAST(%({w}_day)s AS date), (
            SELECT MAX(day) FROM ootci_jobday r WHERE r.backend_id = k.backend_id AND r.event_type = %({w}_event)s
              AND r.day >= CAST(%({w}_day)s AS date) AND r.seen <> 0
              AND (r.newer_day IS NULL OR r.newer_day <= CAST(%({w}_day)s AS date)))) AS day
        FROM kept_{w} k"""
    last = f"""
        SELECT d.backend_id, l.finished_at AS last_run FROM ({last_day}) AS d
        CROSS JOIN LATERAL (SELECT j.finished_at FROM ootci_jobresult j WHERE {LATEST.format(w=w)}
            AND j.backend_id = d.backend_id AND j.finished_at < CAST(d.day + 1 AS timestamp) AT TIME ZONE 'UTC'
            ORDER BY j.finished_at DESC LIMIT 1) AS l"""
    named = {
        "kept": kept,
        "cum": cumulative,
        "targets": targets,
        "picked": picked,
        "read": read,
        "values": valued,
        "percentiles": found,
        "prs": prs,
        "last": last,
    }
    # Each bucket read once, whichever ranks it holds.
    return "".join(f", {name}_{w} AS {'MATERIALIZED ' if name == 'read' else ''}({sql})" for name, sql in named.items())


def stats_select(w: str) -> dict[str, str]:
    """The tail and columns of window ``w``'s stats figure row (``hud.stores.db.jobs.figure_select``)."""
    tail = (
        f"FROM kept_{w} k LEFT JOIN percentiles_{w} USING (backend_id) LEFT JOIN prs_{w} USING (backend_id) "
        f"LEFT JOIN last_{w} USING (backend_id)"
    )
    columns = [*rollup.STATS, "duration_avg", *PERCENTILES, "last_run"]
    return {"tail": tail, "backend_id": "backend_id", "prs": "CAST(COALESCE(prs, 0) AS bigint)"} | {
        c: c for c in columns
    }
