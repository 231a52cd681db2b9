"""The HUD store on the Django database: aggregation in SQL (PostgreSQL in production, SQLite for a try-out).

The SQL keeps to what both engines share; the few differences (JSON length, percentiles, day buckets,
seconds between timestamps) sit in :class:`Dialect`. SQLite gets ``percentile_cont`` as a Python
aggregate registered in ``hud.apps``. Definitions live in ``hud.queries``' docstring.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime

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


def outcome_sql(d: Dialect) -> str:
    """The outcome of one report (see hud.queries); :func:`outcome` is the same rule in Python."""
    return f"""CASE
            WHEN j.status <> 'completed' THEN 'running'
            WHEN j.conclusion = 'success' THEN 'success'
            WHEN j.conclusion IN ('skipped', 'neutral') THEN 'skipped'
            WHEN j.conclusion = 'failure' AND (COALESCE(j.failed, 0) > 0 OR {d.has_failed_tests("j.failed_tests")})
                THEN 'test'
            ELSE 'infra' END"""


def latest_sql(d: Dialect, *, backend: bool = False, columns: tuple[str, ...] = ()) -> str:
    """``latest``: the latest attempts of the jobs finished in the window (see hud.queries), with backend_id,
    finished, outcome and the ``columns`` asked for (names of LATEST_COLUMNS).

    The finish-time index narrows the rows to the window before anything is sorted, and only the columns the
    caller reads ride through the sort that picks the latest attempt: that sort is most of the cost. The
    event is fixed by the WHERE clause, so it need not be part of the partition.
    """
    where = f"{FINISHED} >= %(since)s AND j.event_type = %(event)s"
    if backend:
        where += " AND j.backend_id = %(backend_id)s"
    picked = "".join(f", {LATEST_COLUMNS[name]} AS {name}" for name in columns)
    partition = f"{d.bytewise(SHA_KEY)}, j.backend_id, j.workflow_name, j.job_name"
    return f"""
    WITH ranked AS (
        SELECT j.backend_id, {FINISHED} AS finished, {outcome_sql(d)} AS outcome{picked},
               ROW_NUMBER() OVER (PARTITION BY {partition} ORDER BY {LATEST_ORDER}) AS rn
        FROM ootci_jobresult j WHERE {where}
    ), latest AS (
        SELECT * FROM ranked WHERE rn = 1
    )"""


def lost_sql(*, event: bool = True, backend: bool = False, with_pr: bool = False) -> str:
    """Dispatches of L2+ backends sent (or pending) before the zombie cut-off that never called back."""
    join = "LEFT JOIN ootci_pullrequest pr ON pr.id = dl.pull_request_id" if with_pr else ""
    where = ""
    if event:
        where += " AND dl.event = %(event)s"
    if backend:
        where += " AND dp.backend_id = %(backend_id)s"
    return f"""
        FROM ootci_dispatch dp
        JOIN ootci_delivery dl ON dl.id = dp.delivery_id {join}
        JOIN ootci_backend b ON b.id = dp.backend_id
        WHERE dp.status IN ('sent', 'pending') AND dp.created_at >= %(since)s AND dp.created_at < %(zombie)s
          AND b.level IN {SHOWN_LEVELS} {where}
          AND NOT EXISTS (SELECT 1 FROM ootci_jobresult x WHERE x.dispatch_id = dp.id)"""


def fetch(sql: str, params: dict) -> list[dict]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [c[0] for c in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


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

    def backend_stats(self, *, since: datetime, event: str, backend_id: int | None = None) -> dict[int, q.BackendStats]:
        d = Dialect()
        params = self._params(d, since, event=event, backend_id=backend_id)
        sql = (
            latest_sql(
                d,
                backend=backend_id is not None,
                columns=("pr_number", "conclusion", "queue_time", "execution_time"),
            )
            + f"""
        SELECT backend_id,
            SUM(CASE WHEN outcome = 'success' THEN 1 ELSE 0 END) AS successes,
            SUM(CASE WHEN outcome = 'test' THEN 1 ELSE 0 END) AS test_failures,
            SUM(CASE WHEN outcome = 'infra' THEN 1 ELSE 0 END) AS infra_failures,
            SUM(CASE WHEN outcome = 'running' THEN 1 ELSE 0 END) AS running,
            SUM(CASE WHEN outcome = 'skipped' THEN 1 ELSE 0 END) AS skipped,
            SUM(CASE WHEN outcome = 'infra' AND conclusion = 'timed_out' THEN 1 ELSE 0 END) AS timed_out,
            COUNT(DISTINCT pr_number) AS prs,
            {d.pct("queue_time", 0.5)} AS queue_median, {d.pct("queue_time", 0.9)} AS queue_p90,
            AVG(queue_time) AS queue_avg,
            {d.pct("execution_time", 0.5)} AS duration_median, AVG(execution_time) AS duration_avg,
            MAX(finished) AS last_run
        FROM latest GROUP BY backend_id"""
        )
        rows = {r["backend_id"]: r for r in fetch(sql, params)}
        lost = self._lost(d, params, backend_id)
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

    def _lost(self, d: Dialect, params: dict, backend_id: int | None) -> dict[int, int]:
        sql = "SELECT dp.backend_id AS backend_id, COUNT(*) AS n" + lost_sql(backend=backend_id is not None)
        return {r["backend_id"]: int(r["n"]) for r in fetch(sql + " GROUP BY dp.backend_id", params)}

    def daily(self, *, since: datetime, event: str, backend_id: int | None = None) -> dict[int, list[q.DayRate]]:
        d = Dialect()
        params = self._params(d, since, event=event, backend_id=backend_id)
        sql = (
            latest_sql(d, backend=backend_id is not None)
            + f"""
        SELECT backend_id, {d.day("finished")} AS day,
            SUM(CASE WHEN outcome = 'success' THEN 1 ELSE 0 END) AS ok,
            SUM(CASE WHEN outcome IN ('success', 'test', 'infra') THEN 1 ELSE 0 END) AS total
        FROM latest GROUP BY backend_id, {d.day("finished")}
        UNION ALL
        SELECT dp.backend_id, {d.day("dp.created_at")}, 0, COUNT(*)
        {lost_sql(backend=backend_id is not None)}
        GROUP BY dp.backend_id, {d.day("dp.created_at")}"""
        )
        sums: dict[int, dict[date, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
        for r in fetch(sql, params):
            cell = sums[r["backend_id"]][as_date(r["day"])]
            cell[0] += int(r["ok"])
            cell[1] += int(r["total"])
        return {
            bid: [q.DayRate(day, ok, total) for day, (ok, total) in sorted(days.items()) if total]
            for bid, days in sorted(sums.items())
        }

    def pr_run_p90(self, *, since: datetime) -> dict[int, float]:
        d = Dialect()
        params = self._params(d, since, event="pull_request")
        sql = (
            latest_sql(d, columns=("pr_number", "sha", "began"))
            + f"""
        , per_pr AS (
            SELECT backend_id, {d.seconds("MAX(finished)", "MIN(began)")} AS span
            FROM latest WHERE outcome <> 'running' GROUP BY backend_id, pr_number, sha
        )
        SELECT backend_id, {d.pct("span", 0.9)} AS p90 FROM per_pr GROUP BY backend_id"""
        )
        return {r["backend_id"]: seconds(r["p90"]) for r in fetch(sql, params) if r["p90"] is not None}

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
        params = self._params(d, since, event=event, backend_id=backend_id)
        having = "HAVING SUM(bad) > 0" if failing_only else ""
        sql = (
            latest_sql(d, backend=True, columns=("pr_number", "sha"))
            + f"""
        , keyed AS (
            SELECT pr_number, sha, MAX(finished) AS at,
                   SUM(CASE WHEN outcome IN ('test', 'infra') THEN 1 ELSE 0 END) AS bad, 0 AS lost
            FROM latest GROUP BY pr_number, sha
            UNION ALL
            SELECT pr.number, COALESCE(NULLIF(dl.head_sha, ''), dl.delivery_id), dp.created_at, 1, 1
            {lost_sql(backend=True, with_pr=True)}
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
