"""The HUD store on the Django database: job-result reads in SQL (PostgreSQL in production, SQLite for a try-out).

The SQL keeps to what both engines share; the few differences (JSON length, percentiles, day buckets,
seconds between timestamps) sit in :class:`Dialect`. SQLite gets ``percentile_cont`` as a Python
aggregate registered in ``hud.apps``. Outcome, finish time and tested SHA are the JobResult columns
``outcome``, ``finished_at`` and ``job_sha`` (``ootci.models``); definitions live in ``hud.figures.queries``' docstring.
"""

from __future__ import annotations

from datetime import UTC, datetime, time

from django.db import connection

from hud.stores.base import (
    COUNTED,
    FIGURE_COLUMNS,
    JOB_COLUMNS,
    NEEDS,
    OUTCOME_COUNTS,
    OVERRUN_SECONDS,
    Ask,
    BackendWindow,
    Windows,
    as_datetime,
    latest_attempts,
    latest_order,
)
from hud.stores.db import rollup, runs, stats
from ootci.models import JobResult

# What a caller of latest_sql may ask for beyond backend_id, finished_at and outcome.
LATEST_COLUMNS = {
    "job_sha": "j.job_sha",
    "pr_number": "j.pr_number",
    "conclusion": "j.conclusion",
    "queue_time": "j.queue_time",
    "dependency_wait": "j.dependency_wait",
    "execution_time": "j.execution_time",
    "began": "COALESCE(j.started_at, j.created_at)",
}
TEXT_FIELDS = {"event_type", "job_sha", "workflow_name", "job_name"}


class Dialect:
    def __init__(self) -> None:
        self.pg = connection.vendor == "postgresql"

    def pct(self, col: str, p: float) -> str:
        if self.pg:
            return f"percentile_cont({p}) WITHIN GROUP (ORDER BY {col})"
        return f"percentile_cont({col}, {p})"

    def day(self, col: str) -> str:
        return f"CAST(({col} AT TIME ZONE 'UTC') AS date)" if self.pg else f"date({col})"

    def seconds(self, later: str, earlier: str) -> str:
        if self.pg:
            return f"EXTRACT(EPOCH FROM ({later} - {earlier}))"
        # julianday() is a day count in a double: about 50 µs of error at today's dates, so rounded to milliseconds
        # (3 h minus a second read as 10799.000005 s, and a gate at exactly 3 h would tip on the noise).
        return f"ROUND((julianday({later}) - julianday({earlier})) * 86400.0, 3)"

    def bytewise(self, col: str) -> str:
        """``col`` compared byte by byte: for grouping keys, where only equality matters, this lets PostgreSQL
        sort with memcmp and abbreviated keys instead of the locale (SQLite always compares bytes)."""
        return f'{col} COLLATE "C"' if self.pg else col

    def param(self, value: datetime):
        return connection.ops.adapt_datetimefield_value(value)

    def null(self, sql_type: str) -> str:
        """A typed NULL: PostgreSQL resolves the column types of a UNION pairwise, so an untyped NULL can clash."""
        return f"CAST(NULL AS {sql_type})" if self.pg else "NULL"


def latest_sql(d: Dialect, windows: Windows, *, backend: bool = False, columns: dict[str, tuple] | None = None) -> str:
    """``latest_w`` for each window ``w``: the latest attempts of the jobs finished in that window (see
    hud.figures.queries), with backend_id, finished_at, outcome and the columns ``columns[w]`` asked for (names of
    LATEST_COLUMNS).

    ``windows`` maps names to (event, since); their parameters are ``w_event`` and ``w_since`` (:func:`window_params`).
    On PostgreSQL an attempt is its job's latest in the window when it finished in the window and every newer attempt
    of its job (``JobResult.JOB_FIELDS``, ``LATEST_ORDER``) finished before it: ``newer_finished_at``, the latest
    finish among the newer attempts, which the database keeps on every write (migration ootci 0033), so the window is
    a filter, not a sort (at 1,000,000 job results the 30-day sort took seconds). A shorter window's latest attempts
    are not among the longer one's (a re-run can finish before its first attempt): the condition is per window.
    SQLite, which has no such column, numbers each window's rows by job, newest report first, and keeps the first.
    """
    job = ", ".join(d.bytewise(f"j.{f}") if f in TEXT_FIELDS else f"j.{f}" for f in JobResult.JOB_FIELDS)
    ctes = []
    for w in windows:
        picked = (columns or {}).get(w, ())
        row = "j.backend_id, j.finished_at, j.outcome" + "".join(f", {LATEST_COLUMNS[c]} AS {c}" for c in picked)
        where = f"j.event_type = %({w}_event)s AND j.finished_at >= %({w}_since)s"
        if backend:
            where += " AND j.backend_id = %(backend_id)s"
        if d.pg:
            # The database keeps each attempt's newer_finished_at (migration ootci 0033): no sort needed. The second
            # condition follows from the first two; stated, it lets the planner read the covering index of the
            # attempts that can be latest (0039) alone.
            newest = (
                f"(j.newer_finished_at IS NULL OR j.newer_finished_at < %({w}_since)s)"
                " AND (j.newer_finished_at IS NULL OR j.newer_finished_at < j.finished_at)"
            )
            select = f"SELECT {row} FROM ootci_jobresult j WHERE {where} AND {newest}"
        else:
            names = ", ".join(["backend_id", "finished_at", "outcome", *picked])
            ranking = f"ROW_NUMBER() OVER (PARTITION BY {job} ORDER BY {latest_order('j.')}) AS rn"
            select = f"SELECT {names} FROM (SELECT {row}, {ranking} FROM ootci_jobresult j WHERE {where}) WHERE rn = 1"
        ctes.append(f"latest_{w} AS (\n        {select}\n    )")
    return "\n    WITH " + ", ".join(ctes)


def window_params(d: Dialect, windows: Windows, *, backend_id: int | None = None) -> dict:
    params: dict = {"backend_id": backend_id}
    for name, (event, since) in windows.items():
        params[f"{name}_event"], params[f"{name}_since"] = event, d.param(since)
        params[f"{name}_day"] = since.astimezone(UTC).date()
    return params | (rollup.edge_params(windows) if d.pg else {})


def fetch(sql: str, params: dict) -> list[dict]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [c[0] for c in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def figure_select(d: Dialect, kind: str, tail: str, **columns: str) -> str:
    """A figure row: its ``kind``, then FIGURE_COLUMNS, typed NULL where ``columns`` give no SQL."""
    picked = ", ".join(f"{columns.get(col, d.null(t))} AS {col}" for col, t in FIGURE_COLUMNS.items())
    return f"SELECT '{kind}' AS kind, {picked} {tail}"


def count(outcome: str, *, also: str = "") -> str:
    return f"SUM(CASE WHEN outcome = '{outcome}'{also} THEN 1 ELSE 0 END)"


def is_midnight(moment: datetime) -> bool:
    return moment.astimezone(UTC).time() == time.min


def daily_rollup(d: Dialect, w: str, *, backend: bool) -> str:
    """The daily figure of window ``w`` starting at a UTC midnight, from the roll-up the database keeps (migration
    ootci 0040): the latest attempts of that window, by the days of their finish and of their newer attempts' finish,
    counted exactly as ``latest_w`` would count them."""
    where = f"event_type = %({w}_event)s AND day >= CAST(%({w}_day)s AS date)"
    where += f" AND (newer_day IS NULL OR newer_day < CAST(%({w}_day)s AS date))"
    if backend:
        where += " AND backend_id = %(backend_id)s"
    # A day of latest attempts, counted or not (a skipped run alone): the rows' query lists it too, total 0.
    tail = f"FROM ootci_jobday WHERE {where} GROUP BY backend_id, day HAVING SUM(seen) > 0"
    return figure_select(d, f"daily:{w}", tail, backend_id="backend_id", day="day", ok="SUM(ok)", total="SUM(total)")


def figure_selects(d: Dialect, asks: list[Ask], windows: Windows, *, backend: bool = False) -> list[str]:
    """One SELECT over its window's latest attempts (``latest_w``) per figure asked for; on PostgreSQL a daily figure
    of a window starting at a UTC midnight reads the roll-up instead (:func:`daily_rollup`), as do the gates and the
    stats (``hud.stores.db.rollup``, ``hud.stores.db.stats``)."""
    selects = []
    # What the stats and the gates both count per backend.
    per_backend = {column: count(outcome) for column, outcome in OUTCOME_COUNTS.items()} | {
        "backend_id": "backend_id",
        "timed_out": count("infra", also=" AND conclusion = 'timed_out'"),
    }
    for kind, w in asks:
        mine = f"FROM latest_{w}"
        if kind == "stats" and d.pg:
            columns = stats.stats_select(w)
            selects.append(figure_select(d, f"stats:{w}", columns.pop("tail"), **columns))
        elif kind == "stats":
            selects.append(
                figure_select(
                    d,
                    f"stats:{w}",
                    f"{mine} GROUP BY backend_id",
                    **per_backend,
                    prs="COUNT(DISTINCT pr_number)",
                    queue_median=d.pct("queue_time", 0.5),
                    queue_p90=d.pct("queue_time", 0.9),
                    queue_avg="AVG(queue_time)",
                    duration_median=d.pct("execution_time", 0.5),
                    duration_avg="AVG(execution_time)",
                    last_run="MAX(finished_at)",
                )
            )
        elif kind == "daily" and d.pg and is_midnight(windows[w][1]):
            selects.append(daily_rollup(d, w, backend=backend))
        elif kind == "daily":
            day = d.day("finished_at")
            selects.append(
                figure_select(
                    d,
                    f"daily:{w}",
                    f"{mine} GROUP BY backend_id, {day}",
                    backend_id="backend_id",
                    day=day,
                    ok=count("success"),
                    total="SUM(CASE WHEN outcome IN ('success', 'test', 'infra') THEN 1 ELSE 0 END)",
                )
            )
        elif kind == "gates" and d.pg:
            # Whole days from the roll-up, the first day from the rows (hud.stores.db.rollup); a backend whose
            # attempts of the window were all removed leaves rows of zeros, which the rows' query would not list.
            tail = f"FROM ({rollup.gates_parts(w, backend=backend)}) parts GROUP BY backend_id HAVING SUM(seen) > 0"
            selects.append(figure_select(d, f"gates:{w}", tail, **rollup.GATES))
        elif kind == "gates":
            selects.append(
                figure_select(
                    d,
                    f"gates:{w}",
                    f"{mine} GROUP BY backend_id",
                    **per_backend,
                    overruns=f"SUM(CASE WHEN {COUNTED} AND execution_time > {OVERRUN_SECONDS} THEN 1 ELSE 0 END)",
                    queue_avg="AVG(queue_time)",
                    dependency_avg="AVG(dependency_wait)",
                )
            )
        elif kind == "run" and d.pg:
            selects.append(
                figure_select(d, f"run:{w}", f"FROM runs_{w}", backend_id="backend_id", p50="p50", p90="p90")
            )
        else:
            selects.append(run_select(d, w, backend=backend))
    return selects


def run_select(d: Dialect, w: str, *, backend: bool) -> str:
    """SQLite: the run times of window ``w`` from its event's newest attempts (numbered by job, newest first): a run
    (backend, PR, tested SHA) from the earliest start of its jobs' newest attempts that are not running to their last
    finish, counted when that finish is in the window (on PostgreSQL ``hud.stores.db.runs`` reads the same from
    migration ootci 0045's table)."""
    job = ", ".join(d.bytewise(f"j.{f}") if f in TEXT_FIELDS else f"j.{f}" for f in JobResult.JOB_FIELDS)
    mine = " AND j.backend_id = %(backend_id)s" if backend else ""
    newest = (
        f"SELECT j.backend_id, j.pr_number, j.job_sha, j.finished_at, j.outcome, {LATEST_COLUMNS['began']} AS began, "
        f"ROW_NUMBER() OVER (PARTITION BY {job} ORDER BY {latest_order('j.')}) AS rn "
        f"FROM ootci_jobresult j WHERE j.event_type = %({w}_event)s{mine}"
    )
    per_run = (
        f"SELECT backend_id, {d.seconds('MAX(finished_at)', 'MIN(began)')} AS span FROM ({newest}) AS newest "
        "WHERE rn = 1 AND outcome <> 'running' GROUP BY backend_id, pr_number, job_sha "
        f"HAVING MAX(finished_at) >= %({w}_since)s"
    )
    tail = f"FROM ({per_run}) AS runs GROUP BY backend_id"
    return figure_select(d, f"run:{w}", tail, backend_id="backend_id", p50=d.pct("span", 0.5), p90=d.pct("span", 0.9))


def job_rows(rows) -> list[dict]:
    """Job rows (JOB_COLUMNS and job_sha) of a JobResult queryset, newest first."""
    return list(rows.order_by(*JobResult.LATEST_ORDER).values(*JOB_COLUMNS, "job_sha"))


class DatabaseStore:
    def figure_rows(self, *, windows: Windows, asks: list[Ask], backend_id: int | None = None) -> list[dict]:
        """The figures asked for, in one statement: each window's latest attempts picked once for all its figures."""
        d = Dialect()
        columns = {w: tuple(dict.fromkeys(c for kind, ww in asks if ww == w for c in NEEDS[kind])) for w in windows}
        sql = latest_sql(d, windows, backend=backend_id is not None, columns=columns)
        if d.pg:
            sql += runs.runs_ctes(asks, backend=backend_id is not None)
            sql += stats.stats_ctes(windows, asks, backend=backend_id is not None)
        return fetch(
            sql + "\nUNION ALL ".join(figure_selects(d, asks, windows, backend=backend_id is not None)),
            window_params(d, windows, backend_id=backend_id),
        )

    def sha_keys(self, window: BackendWindow, *, failing_only: bool, limit: int) -> list[dict]:
        return self._sha_keys(window, having="HAVING SUM(bad) > 0" if failing_only else "", tail=f"LIMIT {int(limit)}")

    def sha_keys_of(self, window: BackendWindow, *, shas: list[str]) -> list[dict]:
        params = {f"sha{i}": sha for i, sha in enumerate(shas)}
        return self._sha_keys(
            window, where=f"WHERE sha IN ({', '.join(f'%({p})s' for p in params) or 'NULL'})", **params
        )

    def _sha_keys(self, window: BackendWindow, *, where: str = "", having: str = "", tail: str = "", **params) -> list:
        d = Dialect()
        windows = {"m": (window.event, window.since)}
        sql = latest_sql(d, windows, backend=True, columns={"m": ("pr_number", "job_sha")})
        sql += f"""
        , keyed AS (
            SELECT pr_number, job_sha AS sha, finished_at AS at,
                CASE WHEN outcome IN ('test', 'infra') THEN 1 ELSE 0 END AS bad
            FROM latest_m
        )
        SELECT pr_number, sha, MAX(at) AS at, SUM(bad) AS bad FROM keyed {where}
        GROUP BY pr_number, sha {having} ORDER BY MAX(at) DESC, sha {tail}"""
        found = fetch(sql, window_params(d, windows, backend_id=window.backend_id) | params)
        return [r | {"at": as_datetime(r["at"]), "bad": int(r["bad"])} for r in found]

    def cells(self, window: BackendWindow, *, shas: list[str]) -> list[dict]:
        if not shas:
            return []
        jobs = JobResult.objects.filter(backend_id=window.backend_id, event_type=window.event, job_sha__in=shas)
        return latest_attempts(job_rows(jobs.filter(finished_at__gte=window.since)))

    # Point reads, of the database only (``hud.figures.pages``): not in ``Store``.

    def pr_jobs(self, *, number: int) -> list[dict]:
        """Job rows (and ``job_sha``) of every pull_request attempt of upstream PR ``number``, newest first."""
        return job_rows(JobResult.objects.filter(pr_number=number, event_type="pull_request"))

    def job_attempts(self, *, backend_id: int, job_id: int) -> list[dict]:
        """Job rows of every attempt of the job of attempt ``job_id`` of this backend, newest first ([] if none)."""
        j = JobResult.objects.filter(backend_id=backend_id, id=job_id).first()
        return job_rows(j.attempts()) if j is not None else []
