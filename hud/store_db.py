"""The HUD store on the Django database: aggregation in SQL (PostgreSQL in production, SQLite for a try-out).

The SQL keeps to what both engines share; the few differences (JSON length, percentiles, day buckets,
seconds between timestamps) sit in :class:`Dialect`. SQLite gets ``percentile_cont`` as a Python
aggregate registered in ``hud.apps``. Definitions live in ``hud.queries``' docstring.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils.dateparse import parse_datetime

from hud import queries as q
from ootci.models import Backend, Dispatch, JobResult, PullRequest

FINISHED = "COALESCE(j.completed_at, j.started_at, j.created_at)"  # indexed with event_type: job_event_finished
SHA_KEY = "COALESCE(NULLIF(j.head_sha, ''), j.delivery_id)"
LATEST_ORDER = "j.created_at DESC, j.run_attempt DESC, j.id DESC"
SHOWN_LEVELS = "('L2', 'L3', 'L4')"
# What a caller of latest_sql may ask for beyond backend_id, finished and outcome.
LATEST_COLUMNS = {
    "sha": SHA_KEY,
    "pr_number": "j.pr_number",
    "conclusion": "j.conclusion",
    "queue_time": "j.queue_time",
    "execution_time": "j.execution_time",
    "began": "COALESCE(j.started_at, j.created_at)",
}


class Dialect:
    def __init__(self) -> None:
        self.pg = connection.vendor == "postgresql"

    def has_failed_tests(self, col: str) -> str:
        return f"jsonb_array_length({col}) > 0" if self.pg else f"json_array_length({col}) > 0"

    def pct(self, col: str, p: float) -> str:
        if self.pg:
            return f"percentile_cont({p}) WITHIN GROUP (ORDER BY {col})"
        return f"percentile_cont({col}, {p})"

    def day(self, col: str) -> str:
        return f"CAST(({col} AT TIME ZONE 'UTC') AS date)" if self.pg else f"date({col})"

    def seconds(self, later: str, earlier: str) -> str:
        if self.pg:
            return f"EXTRACT(EPOCH FROM ({later} - {earlier}))"
        return f"((julianday({later}) - julianday({earlier})) * 86400.0)"

    def bytewise(self, col: str) -> str:
        """``col`` compared byte by byte: for grouping keys, where only equality matters, this lets PostgreSQL
        sort with memcmp and abbreviated keys instead of the locale (SQLite always compares bytes)."""
        return f'{col} COLLATE "C"' if self.pg else col

    def param(self, value: datetime):
        return connection.ops.adapt_datetimefield_value(value)

    def null(self, sql_type: str) -> str:
        """A typed NULL: PostgreSQL resolves the column types of a UNION pairwise, so an untyped NULL can clash."""
        return f"CAST(NULL AS {sql_type})" if self.pg else "NULL"


def outcome_sql(d: Dialect) -> str:
    """The outcome of one report (see hud.queries); :func:`outcome` is the same rule in Python."""
    return f"""CASE
            WHEN j.status <> 'completed' THEN 'running'
            WHEN j.conclusion = 'success' THEN 'success'
            WHEN j.conclusion IN ('skipped', 'neutral') THEN 'skipped'
            WHEN j.conclusion = 'failure' AND (COALESCE(j.failed, 0) > 0 OR {d.has_failed_tests("j.failed_tests")})
                THEN 'test'
            ELSE 'infra' END"""


def latest_sql(d: Dialect, windows: Windows, *, backend: bool = False, columns: dict[str, tuple] | None = None) -> str:
    """``latest_w`` for each window ``w``: the latest attempts of the jobs finished in that window (see hud.queries),
    with backend_id, finished, outcome and the columns ``columns[w]`` asked for (names of LATEST_COLUMNS).

    ``windows`` maps names to (event, since); their parameters are ``w_event`` and ``w_since`` (:func:`window_params`).
    Each window sorts its rows by job, newest report first, and keeps each job's first row (DISTINCT ON; SQLite, which
    lacks it, numbers the rows). That sort is most of the cost, so only the columns the window's figures read ride
    through it. A sort per window is cheaper than one shared by the longest window: a shorter window's latest
    attempts are not among the longer one's (a re-run can finish before its first attempt), so sharing takes a
    running MAX over every row and column of the longest window, all of which then has to be materialized.
    """
    job = ", ".join(d.bytewise(col) for col in (SHA_KEY, "j.workflow_name", "j.job_name")) + ", j.backend_id"
    ctes = []
    for w in windows:
        picked = (columns or {}).get(w, ())
        row = f"j.backend_id, {FINISHED} AS finished, {outcome_sql(d)} AS outcome"
        row += "".join(f", {LATEST_COLUMNS[name]} AS {name}" for name in picked)
        where = f"j.event_type = %({w}_event)s AND {FINISHED} >= %({w}_since)s"
        if backend:
            where += " AND j.backend_id = %(backend_id)s"
        if d.pg:
            select = f"SELECT DISTINCT ON ({job}) {row} FROM ootci_jobresult j WHERE {where}"
            select += f" ORDER BY {job}, {LATEST_ORDER}"
        else:
            names = ", ".join(["backend_id", "finished", "outcome", *picked])
            ranking = f"ROW_NUMBER() OVER (PARTITION BY {job} ORDER BY {LATEST_ORDER}) AS rn"
            select = f"SELECT {names} FROM (SELECT {row}, {ranking} FROM ootci_jobresult j WHERE {where}) WHERE rn = 1"
        ctes.append(f"latest_{w} AS (\n        {select}\n    )")
    return "\n    WITH " + ", ".join(ctes)


def lost_sql(
    *, event: bool = True, backend: bool = False, with_pr: bool = False, window: str = "", join: str = ""
) -> str:
    """Dispatches of L2+ backends sent (or pending) before the zombie cut-off that never called back (in ``window``:
    its ``w_since`` and ``w_event`` parameters; else ``since`` and ``event``), with ``join`` (SQL) joined in."""
    prefix = f"{window}_" if window else ""
    if with_pr:
        join = f"LEFT JOIN ootci_pullrequest pr ON pr.id = dl.pull_request_id {join}"
    where = ""
    if event:
        where += f" AND dl.event = %({prefix}event)s"
    if backend:
        where += " AND dp.backend_id = %(backend_id)s"
    return f"""
        FROM ootci_dispatch dp
        JOIN ootci_delivery dl ON dl.id = dp.delivery_id {join}
        JOIN ootci_backend b ON b.id = dp.backend_id
        WHERE dp.status IN ('sent', 'pending') AND dp.created_at >= %({prefix}since)s AND dp.created_at < %(zombie)s
          AND b.level IN {SHOWN_LEVELS} {where}
          AND NOT EXISTS (SELECT 1 FROM ootci_jobresult x WHERE x.dispatch_id = dp.id)"""


def fetch(sql: str, params: dict) -> list[dict]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [c[0] for c in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


# --- figures: several in one statement, each window's latest attempts picked once ---------------------------------

# A figure is asked for as (kind, window name); kinds: "stats" (BackendStats per backend, lost dispatches included),
# "daily" (DayRates per backend, only days with a total) and "run" (p90 of PR run time per backend).
Ask = tuple[str, str]
Windows = dict[str, tuple[str, datetime]]  # name → (event, since)
# What each kind reads of a latest attempt, beyond backend_id, finished and outcome.
NEEDS = {
    "stats": ("pr_number", "conclusion", "queue_time", "execution_time"),
    "daily": (),
    "run": ("pr_number", "sha", "began"),
}
# Every figure row has these columns (a statement is a UNION ALL of one SELECT per figure), after ``kind``.
FIGURE_COLUMNS = {
    "backend_id": "bigint",
    "day": "date",
    "successes": "bigint",
    "test_failures": "bigint",
    "infra_failures": "bigint",
    "running": "bigint",
    "skipped": "bigint",
    "timed_out": "bigint",
    "prs": "bigint",
    "queue_median": "double precision",
    "queue_p90": "double precision",
    "queue_avg": "double precision",
    "duration_median": "double precision",
    "duration_avg": "double precision",
    "last_run": "timestamp with time zone",
    "ok": "bigint",
    "total": "bigint",
    "p90": "double precision",
}


def window_params(d: Dialect, windows: Windows, *, backend_id: int | None = None) -> dict:
    params = {"zombie": d.param(q.zombie_before()), "backend_id": backend_id}
    for name, (event, since) in windows.items():
        params[f"{name}_event"], params[f"{name}_since"] = event, d.param(since)
    if windows:
        params["lost_since"] = d.param(min(since for _, since in windows.values()))  # see lost_selects
    return params


def figure_select(d: Dialect, name: str, tail: str, **columns: str) -> str:
    """A figure row: its kind (``name``, unless ``columns`` give the SQL of ``kind``), then FIGURE_COLUMNS, typed NULL
    where ``columns`` give no SQL."""
    kind = columns.pop("kind", f"'{name}'")
    picked = ", ".join(f"{columns.get(col, d.null(t))} AS {col}" for col, t in FIGURE_COLUMNS.items())
    return f"SELECT {kind} AS kind, {picked} {tail}"


def figure_selects(d: Dialect, asks: list[Ask]) -> list[str]:
    """One SELECT over its window's latest attempts (``latest_w``) per figure asked for."""
    selects = []
    for kind, w in asks:
        mine = f"FROM latest_{w}"
        if kind == "stats":
            selects.append(
                figure_select(
                    d,
                    f"stats:{w}",
                    f"{mine} GROUP BY backend_id",
                    backend_id="backend_id",
                    successes="SUM(CASE WHEN outcome = 'success' THEN 1 ELSE 0 END)",
                    test_failures="SUM(CASE WHEN outcome = 'test' THEN 1 ELSE 0 END)",
                    infra_failures="SUM(CASE WHEN outcome = 'infra' THEN 1 ELSE 0 END)",
                    running="SUM(CASE WHEN outcome = 'running' THEN 1 ELSE 0 END)",
                    skipped="SUM(CASE WHEN outcome = 'skipped' THEN 1 ELSE 0 END)",
                    timed_out="SUM(CASE WHEN outcome = 'infra' AND conclusion = 'timed_out' THEN 1 ELSE 0 END)",
                    prs="COUNT(DISTINCT pr_number)",
                    queue_median=d.pct("queue_time", 0.5),
                    queue_p90=d.pct("queue_time", 0.9),
                    queue_avg="AVG(queue_time)",
                    duration_median=d.pct("execution_time", 0.5),
                    duration_avg="AVG(execution_time)",
                    last_run="MAX(finished)",
                )
            )
        elif kind == "daily":
            day = d.day("finished")
            selects.append(
                figure_select(
                    d,
                    f"daily:{w}",
                    f"{mine} GROUP BY backend_id, {day}",
                    backend_id="backend_id",
                    day=day,
                    ok="SUM(CASE WHEN outcome = 'success' THEN 1 ELSE 0 END)",
                    total="SUM(CASE WHEN outcome IN ('success', 'test', 'infra') THEN 1 ELSE 0 END)",
                )
            )
        else:
            per_pr = (
                f"SELECT backend_id, {d.seconds('MAX(finished)', 'MIN(began)')} AS span {mine} "
                "WHERE outcome <> 'running' GROUP BY backend_id, pr_number, sha"
            )
            tail = f"FROM ({per_pr}) per_pr GROUP BY backend_id"
            selects.append(figure_select(d, f"run:{w}", tail, backend_id="backend_id", p90=d.pct("span", 0.9)))
    return selects


def lost_selects(d: Dialect, asks: list[Ask], *, backend: bool) -> list[str]:
    """The lost dispatches the figures asked for count (from the database, whichever store reads job results): one
    SELECT, which finds the lost dispatches once (since the earliest window, ``lost_since``) and counts them per figure.
    """
    kinds = []
    for kind, w in asks:
        if kind in ("stats", "daily"):
            name, daily = ("lost", 0) if kind == "stats" else ("lostday", 1)
            figure = f"'{name}:{w}' AS kind, %({w}_event)s AS event, %({w}_since)s AS since, {daily} AS daily"
            kinds.append(f"SELECT {figure}")
    if not kinds:
        return []
    day = f"CASE WHEN k.daily = 1 THEN {d.day('dp.created_at')} END"
    figures = f"JOIN ({' UNION ALL '.join(kinds)}) k ON k.event = dl.event AND dp.created_at >= k.since"
    lost = lost_sql(event=False, backend=backend, window="lost", join=figures)
    tail = f"{lost} GROUP BY k.kind, dp.backend_id, {day}"
    return [figure_select(d, "", tail, kind="k.kind", backend_id="dp.backend_id", day=day, ok="0", total="COUNT(*)")]


def collect(asks: list[Ask], rows: list[dict]) -> dict[Ask, Any]:
    """The figures asked for, from the rows of figure_selects and lost_selects (from either store)."""
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_kind[r["kind"]].append(r)
    found: dict[Ask, Any] = {}
    for kind, w in asks:
        if kind == "stats":
            lost = {r["backend_id"]: int(r["total"]) for r in by_kind[f"lost:{w}"]}
            found[kind, w] = stats_from({r["backend_id"]: r for r in by_kind[f"stats:{w}"]}, lost)
        elif kind == "daily":
            found[kind, w] = daily_from([*by_kind[f"daily:{w}"], *by_kind[f"lostday:{w}"]])
        else:
            found[kind, w] = {r["backend_id"]: seconds(r["p90"]) for r in by_kind[f"run:{w}"] if r["p90"] is not None}
    return found


def stats_from(rows: dict[int, dict], lost: dict[int, int]) -> dict[int, q.BackendStats]:
    result = {}
    for bid in set(rows) | set(lost):
        r = rows.get(bid, {})
        counts = q.Counts(
            successes=int(r.get("successes") or 0),
            test_failures=int(r.get("test_failures") or 0),
            infra_failures=int(r.get("infra_failures") or 0) + lost.get(bid, 0),
            lost=lost.get(bid, 0),
            running=int(r.get("running") or 0),
            skipped=int(r.get("skipped") or 0),
            timed_out=int(r.get("timed_out") or 0),
        )
        result[bid] = q.BackendStats(
            counts=counts,
            prs=int(r.get("prs") or 0),
            queue_median=seconds(r.get("queue_median")),
            queue_p90=seconds(r.get("queue_p90")),
            queue_avg=seconds(r.get("queue_avg")),
            duration_median=seconds(r.get("duration_median")),
            duration_avg=seconds(r.get("duration_avg")),
            last_run=as_datetime(r.get("last_run")),
        )
    return dict(sorted(result.items()))


def daily_from(rows: list[dict]) -> dict[int, list[q.DayRate]]:
    sums: dict[int, dict[date, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for r in rows:
        cell = sums[r["backend_id"]][as_date(r["day"])]
        cell[0] += int(r["ok"])
        cell[1] += int(r["total"])
    return {
        bid: [q.DayRate(day, ok, total) for day, (ok, total) in sorted(days.items()) if total]
        for bid, days in sorted(sums.items())
    }


def summary_asks(*, event: str, since: datetime, spark_since: datetime | None, week_since: datetime) -> tuple:
    """The windows and figures of ``Store.summary``: a window asked for twice is one window."""
    windows: Windows = {}
    names: dict[tuple[str, datetime], str] = {}

    def window(event_: str, since_: datetime) -> str:
        name = names.setdefault((event_, since_), f"w{len(names)}")
        windows[name] = (event_, since_)
        return name

    stats, week = window(event, since), window("pull_request", week_since)
    asks: list[Ask] = [("stats", stats), ("stats", week), ("run", week)]
    if spark_since is not None:
        asks.append(("daily", window(event, spark_since)))
    return windows, list(dict.fromkeys(asks))


def summary_from(found: dict[Ask, Any], windows: Windows, *, event: str, since: datetime, week_since: datetime):
    names = {v: k for k, v in windows.items()}
    stats, week = names[event, since], names["pull_request", week_since]
    daily = next((v for (kind, _), v in found.items() if kind == "daily"), {})
    return q.Summary(found["stats", stats], daily, found["stats", week], found["run", week])


def as_datetime(value) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value.astimezone(UTC) if value is not None and value.tzinfo else value
    parsed = parse_datetime(str(value))
    return parsed.replace(tzinfo=UTC) if parsed and parsed.tzinfo is None else parsed


def as_date(value) -> date:
    return value if isinstance(value, date) and not isinstance(value, datetime) else date.fromisoformat(str(value)[:10])


def seconds(value) -> float | None:
    return None if value is None else round(float(value), 1)


def job_from_model(j: JobResult) -> q.Job:
    return q.Job(
        id=j.id,
        backend_id=j.backend_id,
        event_type=j.event_type,
        pr_number=j.pr_number,
        head_sha=j.head_sha,
        delivery_id=j.delivery_id,
        workflow_name=j.workflow_name,
        job_name=j.job_name,
        run_id=j.run_id,
        run_attempt=j.run_attempt,
        check_run_id=j.check_run_id,
        status=j.status,
        conclusion=j.conclusion,
        outcome=outcome(j.status, j.conclusion, j.failed, j.failed_tests),
        started_at=j.started_at,
        completed_at=j.completed_at,
        created_at=j.created_at,
        finished_at=j.finished_at,
        queue_time=seconds(j.queue_time),
        execution_time=seconds(j.execution_time),
        passed=j.passed,
        failed=j.failed,
        skipped=j.skipped,
        failed_tests=tuple(j.failed_tests or ()),
        run_url=j.run_url,
        artifact_url=j.artifact_url,
        level=j.level,
        upstream_check_run_id=j.upstream_check_run_id,
        one_shot=j.one_shot,
        relay_decided=j.relay_decided,
        source=j.source,
        upstream_repo=j.upstream_repo,
    )


def outcome(status: str, conclusion: str, failed: int | None, failed_tests) -> str:
    """The SQL CASE of outcome_sql, for rows read one by one (same rule, same order)."""
    if status != JobResult.Status.COMPLETED:
        return "running"
    if conclusion == "success":
        return "success"
    if conclusion in ("skipped", "neutral"):
        return "skipped"
    if conclusion == "failure" and ((failed or 0) > 0 or failed_tests):
        return "test"
    return "infra"


def latest_key(j: JobResult) -> tuple:
    return (j.backend_id, j.event_type, j.head_sha or j.delivery_id, j.workflow_name, j.job_name)


def newest_first(j: JobResult) -> tuple:
    return (j.created_at, j.run_attempt, j.id)


class DatabaseStore:
    def backends(self) -> list[q.BackendInfo]:
        return [
            q.BackendInfo(b.id, b.repo, b.level, b.device, tuple(b.oncalls), tuple(b.events), b.enabled)
            for b in Backend.objects.filter(enabled=True).order_by("repo")
        ]

    def _params(self, d: Dialect, since: datetime, **extra) -> dict:
        return {"since": d.param(since), "zombie": d.param(q.zombie_before()), **extra}

    def _figures(self, windows: Windows, asks: list[Ask], backend_id: int | None = None) -> dict[Ask, Any]:
        """The figures asked for, in one statement: each window's latest attempts picked once for all its figures."""
        d = Dialect()
        columns = {w: tuple(dict.fromkeys(c for kind, ww in asks if ww == w for c in NEEDS[kind])) for w in windows}
        selects = [*figure_selects(d, asks), *lost_selects(d, asks, backend=backend_id is not None)]
        sql = latest_sql(d, windows, backend=backend_id is not None, columns=columns) + "\nUNION ALL ".join(selects)
        return collect(asks, fetch(sql, window_params(d, windows, backend_id=backend_id)))

    def backend_stats(self, *, since: datetime, event: str, backend_id: int | None = None) -> dict[int, q.BackendStats]:
        return self._figures({"w": (event, since)}, [("stats", "w")], backend_id)["stats", "w"]

    def daily(self, *, since: datetime, event: str, backend_id: int | None = None) -> dict[int, list[q.DayRate]]:
        return self._figures({"w": (event, since)}, [("daily", "w")], backend_id)["daily", "w"]

    def pr_run_p90(self, *, since: datetime) -> dict[int, float]:
        return self._figures({"w": ("pull_request", since)}, [("run", "w")])["run", "w"]

    def summary(self, *, event: str, since: datetime, spark_since: datetime | None, week_since: datetime) -> q.Summary:
        windows, asks = summary_asks(event=event, since=since, spark_since=spark_since, week_since=week_since)
        found = self._figures(windows, asks)
        return summary_from(found, windows, event=event, since=since, week_since=week_since)

    def relay_health(self, *, since: datetime) -> q.RelayHealth:
        d = Dialect()
        params = self._params(d, since)
        sql = f"""
        SELECT
            (SELECT COUNT(*) FROM ootci_delivery WHERE received_at >= %(since)s) AS deliveries,
            (SELECT COUNT(*) FROM ootci_dispatch WHERE created_at >= %(since)s AND status = 'sent') AS sent,
            (SELECT COUNT(*) FROM ootci_dispatch WHERE created_at >= %(since)s AND status = 'failed') AS failed,
            (SELECT COUNT(*) FROM ootci_dispatch WHERE created_at >= %(since)s AND status = 'pending') AS pending,
            (SELECT COUNT(*) {lost_sql(event=False)}) AS lost,
            (SELECT COUNT(*) FROM ootci_callbackrejection WHERE received_at >= %(since)s) AS rejections"""
        r = fetch(sql, params)[0]
        return q.RelayHealth(
            int(r["deliveries"]),
            int(r["sent"]),
            int(r["failed"]),
            int(r["pending"]),
            int(r["lost"]),
            int(r["rejections"]),
        )

    def matrix(
        self, *, backend_id: int, since: datetime, event: str, failing_only: bool, page: int
    ) -> tuple[list[q.MatrixRow], bool]:
        d = Dialect()
        offset = (page - 1) * q.PER_PAGE
        params = window_params(d, {"m": (event, since)}, backend_id=backend_id)
        having = "HAVING SUM(bad) > 0" if failing_only else ""
        sql = (
            latest_sql(d, {"m": (event, since)}, backend=True, columns={"m": ("pr_number", "sha")})
            + f"""
        , keyed AS (
            SELECT pr_number, sha, MAX(finished) AS at,
                   SUM(CASE WHEN outcome IN ('test', 'infra') THEN 1 ELSE 0 END) AS bad, 0 AS lost
            FROM latest_m GROUP BY pr_number, sha
            UNION ALL
            SELECT pr.number, COALESCE(NULLIF(dl.head_sha, ''), dl.delivery_id), dp.created_at, 1, 1
            {lost_sql(backend=True, with_pr=True, window="m")}
        )
        SELECT pr_number, sha, MAX(at) AS at, SUM(lost) AS lost FROM keyed
        GROUP BY pr_number, sha {having} ORDER BY MAX(at) DESC, sha LIMIT {q.PER_PAGE + 1} OFFSET {offset}"""
        )
        keys = fetch(sql, params)
        has_next = len(keys) > q.PER_PAGE
        keys = keys[: q.PER_PAGE]
        cells = self._cells(backend_id, since, event, [k["sha"] for k in keys])
        titles = {
            pr.number: pr
            for pr in PullRequest.objects.filter(number__in=[k["pr_number"] for k in keys if k["pr_number"]])
        }
        rows = []
        for k in keys:
            pr = titles.get(k["pr_number"])
            row_cells = {c.column: c for c in cells.get((k["pr_number"], k["sha"]), [])}
            rows.append(
                q.MatrixRow(
                    k["pr_number"],
                    k["sha"],
                    pr.title if pr else "",
                    pr.author if pr else "",
                    as_datetime(k["at"]),
                    int(k["lost"]),
                    row_cells,
                )
            )
        return rows, has_next

    def _cells(self, backend_id: int, since: datetime, event: str, shas: list[str]) -> dict[tuple, list[q.Job]]:
        if not shas:
            return {}
        jobs = JobResult.objects.filter(backend_id=backend_id, event_type=event).filter(
            Q(head_sha__in=shas) | Q(head_sha="", delivery_id__in=shas)
        )
        best: dict[tuple, JobResult] = {}
        for j in jobs:
            if j.finished_at < since:
                continue
            key = latest_key(j)
            if key not in best or newest_first(j) > newest_first(best[key]):
                best[key] = j
        result: dict[tuple, list[q.Job]] = defaultdict(list)
        for j in best.values():
            result[(j.pr_number, j.head_sha or j.delivery_id)].append(job_from_model(j))
        return result

    def pr_detail(self, *, number: int, backends: list[q.BackendInfo]) -> q.PrDetail | None:
        pr = PullRequest.objects.filter(upstream_repo=settings.UPSTREAM_REPO, number=number).first()
        rows = list(JobResult.objects.filter(pr_number=number, event_type="pull_request"))
        if pr is None and not rows:
            return None
        by_id = {b.id: b for b in backends}
        head = pr.head_sha if pr and pr.head_sha else max(rows, key=newest_first).head_sha
        waiting = self._waiting(number, head, set(by_id))
        groups = []
        for bid, info in by_id.items():
            mine = sorted((j for j in rows if j.backend_id == bid), key=newest_first, reverse=True)
            if not mine and bid not in waiting:
                continue
            latest: dict[tuple, JobResult] = {}
            for j in mine:
                if j.head_sha == head:
                    latest.setdefault(latest_key(j), j)
            current = sorted(
                (job_from_model(j) for j in latest.values()),
                key=lambda j: (_pr_order(j.outcome), q.natural_key(j.column)),
            )
            shown = {j.id for j in current}
            earlier = [job_from_model(j) for j in mine if j.id not in shown]
            groups.append(q.PrGroup(info, current, earlier, waiting.get(bid) if not current else None))
        groups.sort(key=lambda g: (q.LEVELS_SHOWN.index(g.backend.level), g.backend.repo.lower()))
        return q.PrDetail(
            number=number,
            upstream_repo=pr.upstream_repo if pr else (rows[0].upstream_repo if rows else ""),
            title=pr.title if pr else "",
            author=pr.author if pr else "",
            labels=tuple(pr.labels) if pr else (),
            state=pr.state if pr else "",
            head_sha=head,
            html_url=pr.html_url if pr else "",
            groups=groups,
        )

    def _waiting(self, number: int, head: str, backend_ids: set[int]) -> dict[int, q.Waiting]:
        """Per backend, the state of its newest dispatch of the head SHA that has no report."""
        cutoff = q.zombie_before()
        found: dict[int, q.Waiting] = {}
        dispatches = (
            Dispatch.objects.filter(delivery__pull_request__number=number, delivery__head_sha=head)
            .filter(backend_id__in=backend_ids, jobs__isnull=True)
            .order_by("-created_at")
        )
        for dp in dispatches:
            if dp.backend_id in found:
                continue
            state = "failed" if dp.status == Dispatch.Status.FAILED else "lost" if dp.created_at < cutoff else "waiting"
            found[dp.backend_id] = q.Waiting(state, dp.created_at)
        return found

    def job_detail(self, *, backend_id: int, job_id: int) -> q.JobDetail | None:
        j = JobResult.objects.filter(backend_id=backend_id, id=job_id).first()
        if j is None:
            return None
        same = JobResult.objects.filter(
            backend_id=backend_id, event_type=j.event_type, workflow_name=j.workflow_name, job_name=j.job_name
        )
        same = same.filter(head_sha=j.head_sha) if j.head_sha else same.filter(head_sha="", delivery_id=j.delivery_id)
        attempts = sorted(same, key=newest_first, reverse=True)
        title = ""
        if j.pr_number:
            title = PullRequest.objects.filter(number=j.pr_number).values_list("title", flat=True).first() or ""
        return q.JobDetail(job_from_model(j), [job_from_model(a) for a in attempts], title)


def _pr_order(outcome_: str) -> int:
    return {"test": 0, "infra": 0, "running": 1}.get(outcome_, 2)
