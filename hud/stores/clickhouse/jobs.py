"""The HUD store on ClickHouse: the job-result reads of ``hud.stores.base`` over `oot_workflow_job`.

ClickHouse holds only job results, with the domain columns ``finished_at``, ``job_sha`` and ``outcome`` copied as
they are from PostgreSQL; definitions live in ``hud.figures.queries``' docstring and the SQL mirrors
``hud.stores.db.jobs`` step for step:

- the table is read ``FINAL`` (one row per job result, latest version, deleted ones left out), with the window
  condition in WHERE, which ClickHouse applies after that merge;
- the latest attempt of a job within a window starting at ``since`` is its row with ``finished_at >= since >
  newer_finished_at`` (a column that replication keeps, see ``hud.replication``), so latest attempts are a filter, not
  a grouping by job, and each figure reads its window's on its own;
- the figures of one overview (stats, sparklines, the L3 bar) come from one statement (``figures_sql``), a UNION ALL
  of one SELECT per figure as in the database store, whose rows ``store.collect`` reads as it reads the database
  store's;
- ``quantileExactInclusive`` interpolates linearly between closest ranks, as ``percentile_cont`` does;
- datetimes are bound as ``DateTime64(6)`` server-side parameters, so microseconds count as in PostgreSQL;
- before FINAL merges, window reads are pruned by creation time and point reads by sorting key (``in_window``,
  ``matching``), both conditions that every version of a wanted row meets.

Reading: a row is stored again each time its JobResult changes (and the replication overlap re-sends
recent rows), so rows only collapse to the latest version at merge time. Queries must deduplicate:
`SELECT … FROM oot_workflow_job FINAL` (simplest; ClickHouse merges at read time and drops rows marked
deleted), or `argMax(column, version) … GROUP BY id` with `HAVING argMax(is_deleted, version) = 0`.

Latest attempts: each row also carries `newer_finished_at`, the latest finish time of the newer attempts of its
job (`JobResult.JOB_FIELDS`, newer by `JobResult.LATEST_ORDER`), 1970 when it has none. A row is its job's latest
attempt within a window starting at `t` exactly when `finished_at >= t > newer_finished_at`, so the HUD reads latest
attempts with a filter instead of grouping by job. Replication keeps it (see `hud.stores.clickhouse.copy_jobs`).

Each method reads through one ClickHouse session (one client, however many statements); a request shares
one session across its methods (``queries.unit_of_work``). Driver failures surface as ``ClickHouseError``;
``queries`` falls back to the database store then.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from hud.stores.base import (
    COUNTED,
    FIGURE_COLUMNS,
    JOB_COLUMNS,
    OUTCOME_COUNTS,
    OVERRUN_SECONDS,
    Ask,
    BackendWindow,
    Windows,
    latest_order,
)
from hud.stores.clickhouse import connection as clickhouse

SINCE = "{since:DateTime64(6, 'UTC')}"
JOB_ROW = ", ".join([*JOB_COLUMNS, "job_sha"])
NEWEST_FIRST = f"ORDER BY {latest_order()}"
KEY = clickhouse.KEY


def in_window(where: str) -> str:
    """``oot_workflow_job FINAL WHERE where`` for a time window, pruned by creation time before FINAL merges.

    Every version of a row has the row's created_at, and the latest version of a row that meets ``where`` is itself
    a stored row that meets it, so such rows were created no earlier than the earliest stored row (any version)
    that meets it. That minimum is read without FINAL, through the finished_at skip index.
    """
    first = f"SELECT min(created_at) FROM {clickhouse.TABLE} WHERE {where}"
    return f"{clickhouse.TABLE} FINAL WHERE created_at >= ({first}) AND ({where})"


def matching(where: str) -> str:
    """``oot_workflow_job FINAL WHERE where`` for a few rows: only the rows some version of which meets ``where``
    (found without FINAL, by the indexes) are merged; ``where`` is applied again to their latest versions."""
    return f"{clickhouse.TABLE} FINAL WHERE {KEY} IN (SELECT {KEY} FROM {clickhouse.TABLE} WHERE {where}) AND {where}"


def latest_sql(name: str, *, backend: bool = False) -> str:
    """Latest attempts of the jobs finished in window ``name`` (parameters as ``window_parameters``): one row per job,
    with backend_id, job_sha, pr_number, conclusion, queue_time, dependency_wait, execution_time, finished_at, began
    and outcome.
    ClickHouse reads only the columns a caller uses."""
    since = f"{{{name}_since:DateTime64(6, 'UTC')}}"
    where = f"event_type = {{{name}_event:String}} AND finished_at >= {since} AND newer_finished_at < {since}"
    if backend:
        where += " AND backend_id = {backend_id:UInt64}"
    return f"""
    SELECT backend_id, job_sha, pr_number, conclusion, queue_time, dependency_wait, execution_time, finished_at,
        coalesce(started_at, created_at) AS began, outcome
    FROM {in_window(where)}"""


def window_parameters(windows: Windows, **extra: Any) -> dict[str, Any]:
    """Query parameters of ``latest_sql`` (and ``extra``)."""
    found: dict[str, Any] = dict(extra)
    for name, (event, since) in windows.items():
        found[f"{name}_event"], found[f"{name}_since"] = event, since
    return found


def figures_sql(asks: list[Ask], windows: Windows, *, backend: bool) -> str:
    """The figure rows (as ``store.collect`` reads them) of ``asks``: one SELECT per figure over the latest attempts
    of its window, as ``store_db.figure_selects``, in one statement (ClickHouse runs the parts side by side); the run
    times of the windows of one event (``windows``) share one SELECT (``runs_select``)."""
    selects = []
    runs = defaultdict(list)
    for kind, w in asks:
        if kind == "run":
            runs[windows[w][0]].append(w)
    selects += [runs_select(names, backend=backend) for names in runs.values()]
    for kind, w in asks:
        latest = f"FROM ({latest_sql(w, backend=backend)})"
        if kind == "stats":
            selects.append(
                figure_select(
                    f"stats:{w}",
                    f"{latest} GROUP BY backend_id",
                    **{column: f"countIf(outcome = '{outcome}')" for column, outcome in OUTCOME_COUNTS.items()},
                    timed_out="countIf(outcome = 'infra' AND conclusion = 'timed_out')",
                    prs="uniqExact(pr_number)",
                    queue_median="quantileExactInclusive(0.5)(queue_time)",
                    queue_p90="quantileExactInclusive(0.9)(queue_time)",
                    queue_avg="avg(queue_time)",
                    duration_median="quantileExactInclusive(0.5)(execution_time)",
                    duration_avg="avg(execution_time)",
                    last_run="max(finished_at)",
                )
            )
        elif kind == "daily":
            tail = f"{latest} GROUP BY backend_id, day"
            ok, total = "countIf(outcome = 'success')", "countIf(outcome IN ('success', 'test', 'infra'))"
            selects.append(figure_select(f"daily:{w}", tail, day="toDate(finished_at)", ok=ok, total=total))
        elif kind == "gates":
            selects.append(
                figure_select(
                    f"gates:{w}",
                    f"{latest} GROUP BY backend_id",
                    **{column: f"countIf(outcome = '{outcome}')" for column, outcome in OUTCOME_COUNTS.items()},
                    timed_out="countIf(outcome = 'infra' AND conclusion = 'timed_out')",
                    overruns=f"countIf({COUNTED} AND execution_time > {OVERRUN_SECONDS})",
                    queue_avg="avg(queue_time)",
                    dependency_avg="avg(dependency_wait)",
                )
            )
    return " UNION ALL ".join(selects)


def runs_select(names: list[str], *, backend: bool = False) -> str:
    """The run times of the windows ``names`` (one event), as ``hud.stores.db.runs``: a run (backend, PR, tested SHA)
    from the earliest start of its jobs' newest attempts (``newer_finished_at`` 1970) that are not running to their
    last finish, counted in each window where that finish is. A run's attempts may be older than the window, so the
    event's newest attempts are read FINAL whenever they finished, once for all the windows: at 1,000,000 job results
    the readiness figures (two windows) took 1,390 ms when the runs ending in a window were found first and matched by
    (backend, PR, SHA), 620–715 ms with one read per window (440–500 before, when a run was cut at the window's
    start), 520–525 ms with one read (the old tree 490–510 ms in the same run)."""
    first = names[0]
    newest = (
        f"event_type = {{{first}_event:String}} AND newer_finished_at = toDateTime64(0, 6, 'UTC') "
        "AND outcome != 'running'"
    )
    if backend:
        newest += " AND backend_id = {backend_id:UInt64}"
    span = "dateDiff('microsecond', min(coalesce(started_at, created_at)), max(finished_at)) / 1e6"
    per_run = (
        f"SELECT backend_id, {span} AS span, max(finished_at) AS last FROM {clickhouse.TABLE} FINAL WHERE {newest} "
        "GROUP BY backend_id, pr_number, job_sha"
    )
    labels = ", ".join(f"'run:{w}'" for w in names)
    starts = ", ".join(f"{{{w}_since:DateTime64(6, 'UTC')}}" for w in names)
    tail = (
        f"FROM ({per_run}) ARRAY JOIN [{labels}] AS window_kind, [{starts}] AS window_since "
        "WHERE last >= window_since GROUP BY window_kind, backend_id"
    )
    p50, p90 = "quantileExactInclusive(0.5)(span)", "quantileExactInclusive(0.9)(span)"
    return figure_select("window_kind", tail, p50=p50, p90=p90, kind_is_column=True)


def figure_select(kind: str, tail: str, *, kind_is_column: bool = False, **columns: str) -> str:
    """One SELECT with every column of ``store.FIGURE_COLUMNS`` (NULL where ``columns`` gives none); its kind is
    ``kind``, or the column of that name."""
    picked = ", ".join(f"{columns.get(name, 'NULL')} AS {name}" for name in FIGURE_COLUMNS if name != "backend_id")
    named = kind if kind_is_column else f"'{kind}'"
    return f"SELECT {named} AS kind, backend_id, {picked} {tail}"


def select(sql: str, **parameters: Any) -> list[dict[str, Any]]:
    return clickhouse.select(sql, {k: v for k, v in parameters.items() if v is not None})


def jobs(where: str, **parameters: Any) -> list[dict[str, Any]]:
    """Job rows (as the database store's, newest first) of the rows that meet ``where``."""
    rows = select(f"SELECT {JOB_ROW} FROM {matching(where)} {NEWEST_FIRST}", **parameters)
    return [r | {"failed_tests": json.loads(r["failed_tests"] or "[]")} for r in rows]


class ClickHouseStore:
    def figure_rows(self, *, windows: Windows, asks: list[Ask], backend_id: int | None = None) -> list[dict]:
        sql = figures_sql(asks, windows, backend=backend_id is not None)
        with clickhouse.session():
            return select(sql, **window_parameters(windows, backend_id=backend_id))

    def sha_keys(self, window: BackendWindow, *, failing_only: bool, limit: int) -> list[dict]:
        return self._sha_keys(window, having="HAVING bad > 0" if failing_only else "", tail=f"LIMIT {int(limit)}")

    def sha_keys_of(self, window: BackendWindow, *, shas: list[str]) -> list[dict]:
        return self._sha_keys(window, where="WHERE sha IN {shas:Array(String)}", shas=shas)

    def _sha_keys(self, window: BackendWindow, *, where: str = "", having: str = "", tail: str = "", **params) -> list:
        sql = f"""
        SELECT pr_number, job_sha AS sha, max(finished_at) AS at, countIf(outcome IN ('test', 'infra')) AS bad
        FROM ({latest_sql("m", backend=True)}) {where}
        GROUP BY pr_number, sha {having} ORDER BY at DESC, sha {tail}"""
        params |= window_parameters({"m": (window.event, window.since)}, backend_id=window.backend_id)
        with clickhouse.session():
            return [r | {"bad": int(r["bad"])} for r in select(sql, **params)]

    def cells(self, window: BackendWindow, *, shas: list[str]) -> list[dict]:
        if not shas:
            return []
        where = (
            f"backend_id = {{backend_id:UInt64}} AND event_type = {{event:String}} AND finished_at >= {SINCE} "
            f"AND newer_finished_at < {SINCE} AND job_sha IN {{shas:Array(String)}}"
        )
        with clickhouse.session():  # latest attempts in the window, one per job
            return jobs(where, backend_id=window.backend_id, event=window.event, since=window.since, shas=shas)
