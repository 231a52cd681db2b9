"""The HUD store on ClickHouse: job-result aggregates from `oot_workflow_job`, everything else from the database.

ClickHouse holds only job results, so the allowlist (backends and their current levels), dispatches (lost and
waiting ones), deliveries, callback rejections and PR titles still come from the database, through the
database store this class extends; what it overrides are the reads over JobResult. Definitions live in
``hud.queries``' docstring and the SQL mirrors ``hud.store_db`` step for step:

- the table is read ``FINAL`` (one row per job result, latest version, deleted ones left out), with the window
  condition in WHERE, which ClickHouse applies after that merge;
- the latest attempt of a job is ``argMax(…, (created_at, run_attempt, id))`` over the rows in the window;
- ``quantileExactInclusive`` interpolates linearly between closest ranks, as ``percentile_cont`` does;
- datetimes are bound as ``DateTime64(6)`` server-side parameters, so microseconds count as in PostgreSQL;
- before FINAL merges, window reads are pruned by creation time and point reads by sorting key (``in_window``,
  ``matching``), both conditions that every version of a wanted row meets.

Each method reads through one ClickHouse session (one client, however many statements); a request shares
one session across its methods (``queries.unit_of_work``). Driver failures surface as ``ClickHouseError``;
``queries`` falls back to the database store then.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import date, datetime
from typing import Any

from django.conf import settings

from hud import clickhouse
from hud import queries as q
from hud.store_db import DatabaseStore, Dialect, as_date, fetch, latest_key, lost_sql, newest_first, outcome, seconds
from ootci.models import PullRequest

SHA_KEY = "if(head_sha = '', delivery_id, head_sha)"
SINCE = "{since:DateTime64(6, 'UTC')}"
# What the figures need of a latest attempt. failed_tests holds json.dumps of a list, so "[]" is the empty one.
LATEST = {
    "status": "status",
    "conclusion": "conclusion",
    "has_tests": "(ifNull(failed, 0) > 0 OR failed_tests != '[]')",
    "pr_number": "pr_number",
    "queue_time": "queue_time",
    "execution_time": "execution_time",
    "finished_at": "finished_at",
    "began": "coalesce(started_at, created_at)",
}
OUTCOME = """multiIf(status != 'completed', 'running', conclusion = 'success', 'success',
                     conclusion IN ('skipped', 'neutral'), 'skipped', conclusion = 'failure' AND has_tests, 'test',
                     'infra')"""
JOB_FIELDS = (
    "id, backend_id, event_type, pr_number, head_sha, delivery_id, workflow_name, job_name, run_id, run_attempt, "
    "check_run_id, status, conclusion, started_at, completed_at, created_at, finished_at, queue_time, "
    "execution_time, passed, failed, skipped, failed_tests, run_url, artifact_url, level, upstream_check_run_id, "
    "one_shot, relay_decided, source, upstream_repo"
)
STATS_FIELDS = ("pr_number", "queue_time", "execution_time", "finished_at")
# Attempts of one job as the database store finds them: the same head SHA, or (none reported) the same delivery.
SAME_JOB = (
    "backend_id = {backend_id:UInt64} AND event_type = {event:String} AND workflow_name = {workflow:String} "
    "AND job_name = {job:String} AND head_sha = {sha:String} AND (head_sha != '' OR delivery_id = {delivery:String})"
)
PR_JOBS = "pr_number = {number:UInt32} AND event_type = 'pull_request'"
KEY = "(backend_id, event_type, created_at, id)"  # the sorting key: every version of a row has the same


def in_window(where: str) -> str:
    """``oot_workflow_job FINAL WHERE where`` for a time window, pruned by creation time before FINAL merges.

    Every version of a row has the row's created_at, and the latest version of a row that meets ``where`` is itself
    a stored row that meets it, so such rows were created no earlier than the earliest stored row (any version)
    that meets it. That minimum is read without FINAL, through the finished_at skip index.
    """
    first = f"SELECT min(created_at) FROM {clickhouse.TABLE} WHERE {where}"
    return f"{clickhouse.TABLE} FINAL WHERE created_at >= ({first}) AND {where}"


def matching(where: str) -> str:
    """``oot_workflow_job FINAL WHERE where`` for a few rows: only the rows some version of which meets ``where``
    (found without FINAL, by the indexes) are merged; ``where`` is applied again to their latest versions."""
    return f"{clickhouse.TABLE} FINAL WHERE {KEY} IN (SELECT {KEY} FROM {clickhouse.TABLE} WHERE {where}) AND {where}"


def latest_sql(*fields: str, backend: bool = False) -> str:
    """Latest attempts of the jobs of one event finished in the window: one row each with ``fields`` and outcome."""
    where = f"event_type = {{event:String}} AND finished_at >= {SINCE}"
    if backend:
        where += " AND backend_id = {backend_id:UInt64}"
    names = ["status", "conclusion", "has_tests", *fields]
    picked = ", ".join(f"l.{n} AS {name}" for n, name in enumerate(names, start=1))
    return f"""
    SELECT backend_id, sha, {picked}, {OUTCOME} AS outcome
    FROM (
        SELECT backend_id, {SHA_KEY} AS sha,
               argMax(({", ".join(LATEST[n] for n in names)}), (created_at, run_attempt, id)) AS l
        FROM {in_window(where)}
        GROUP BY backend_id, sha, workflow_name, job_name
    )"""


def select(sql: str, **parameters: Any) -> list[dict[str, Any]]:
    return clickhouse.select(sql, {k: v for k, v in parameters.items() if v is not None})


def job_from_row(r: dict[str, Any]) -> q.Job:
    failed_tests = json.loads(r["failed_tests"] or "[]")
    return q.Job(
        id=r["id"],
        backend_id=r["backend_id"],
        event_type=r["event_type"],
        pr_number=r["pr_number"],
        head_sha=r["head_sha"],
        delivery_id=r["delivery_id"],
        workflow_name=r["workflow_name"],
        job_name=r["job_name"],
        run_id=r["run_id"],
        run_attempt=r["run_attempt"],
        check_run_id=r["check_run_id"],
        status=r["status"],
        conclusion=r["conclusion"],
        outcome=outcome(r["status"], r["conclusion"], r["failed"], failed_tests),
        started_at=r["started_at"],
        completed_at=r["completed_at"],
        created_at=r["created_at"],
        finished_at=r["finished_at"],
        queue_time=seconds(r["queue_time"]),
        execution_time=seconds(r["execution_time"]),
        passed=r["passed"],
        failed=r["failed"],
        skipped=r["skipped"],
        failed_tests=tuple(failed_tests or ()),
        run_url=r["run_url"],
        artifact_url=r["artifact_url"],
        level=r["level"],
        upstream_check_run_id=r["upstream_check_run_id"],
        one_shot=bool(r["one_shot"]),
        relay_decided=bool(r["relay_decided"]),
        source=r["source"],
        upstream_repo=r["upstream_repo"],
    )


class ClickHouseStore(DatabaseStore):
    def backend_stats(self, *, since: datetime, event: str, backend_id: int | None = None) -> dict[int, q.BackendStats]:
        sql = f"""
        SELECT backend_id,
            countIf(outcome = 'success') AS successes, countIf(outcome = 'test') AS test_failures,
            countIf(outcome = 'infra') AS infra_failures, countIf(outcome = 'running') AS running,
            countIf(outcome = 'skipped') AS skipped,
            countIf(outcome = 'infra' AND conclusion = 'timed_out') AS timed_out,
            uniqExact(pr_number) AS prs,
            quantileExactInclusive(0.5)(queue_time) AS queue_median,
            quantileExactInclusive(0.9)(queue_time) AS queue_p90, avg(queue_time) AS queue_avg,
            quantileExactInclusive(0.5)(execution_time) AS duration_median, avg(execution_time) AS duration_avg,
            max(finished_at) AS last_run
        FROM ({latest_sql(*STATS_FIELDS, backend=backend_id is not None)}) GROUP BY backend_id"""
        with clickhouse.session():
            rows = {r["backend_id"]: r for r in select(sql, since=since, event=event, backend_id=backend_id)}
        d = Dialect()
        lost = self._lost(d, self._params(d, since, event=event, backend_id=backend_id), backend_id)
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
                last_run=r.get("last_run"),
            )
        return dict(sorted(result.items()))

    def daily(self, *, since: datetime, event: str, backend_id: int | None = None) -> dict[int, list[q.DayRate]]:
        sql = f"""
        SELECT backend_id, toDate(finished_at) AS day, countIf(outcome = 'success') AS ok,
               countIf(outcome IN ('success', 'test', 'infra')) AS total
        FROM ({latest_sql("finished_at", backend=backend_id is not None)}) GROUP BY backend_id, day"""
        with clickhouse.session():
            found = select(sql, since=since, event=event, backend_id=backend_id)
        d = Dialect()
        lost = fetch(
            f"SELECT dp.backend_id AS backend_id, {d.day('dp.created_at')} AS day, 0 AS ok, COUNT(*) AS total "
            f"{lost_sql(backend=backend_id is not None)} GROUP BY dp.backend_id, {d.day('dp.created_at')}",
            self._params(d, since, event=event, backend_id=backend_id),
        )
        sums: dict[int, dict[date, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
        for r in [*found, *lost]:
            cell = sums[r["backend_id"]][as_date(r["day"])]
            cell[0] += int(r["ok"])
            cell[1] += int(r["total"])
        return {
            bid: [q.DayRate(day, ok, total) for day, (ok, total) in sorted(days.items()) if total]
            for bid, days in sorted(sums.items())
        }

    def pr_run_p90(self, *, since: datetime) -> dict[int, float]:
        sql = f"""
        SELECT backend_id, quantileExactInclusive(0.9)(span) AS p90
        FROM (
            SELECT backend_id, dateDiff('microsecond', min(began), max(finished_at)) / 1e6 AS span
            FROM ({latest_sql("pr_number", "began", "finished_at")}) WHERE outcome != 'running'
            GROUP BY backend_id, pr_number, sha
        ) GROUP BY backend_id"""
        with clickhouse.session():
            rows = select(sql, since=since, event="pull_request")
        return {r["backend_id"]: seconds(r["p90"]) for r in rows if r["p90"] is not None}

    def matrix(
        self, *, backend_id: int, since: datetime, event: str, failing_only: bool, page: int
    ) -> tuple[list[q.MatrixRow], bool]:
        offset = (page - 1) * q.PER_PAGE
        lost = self._lost_keys(since=since, event=event, backend_id=backend_id)
        # The page of the union of ClickHouse's SHA rows and the lost dispatches: ClickHouse's first `wanted` rows,
        # plus the rows of SHAs that also have a lost dispatch (whose time or failure that dispatch may change).
        wanted = offset + q.PER_PAGE + 1
        grouped = f"""
        SELECT pr_number, sha, max(finished_at) AS at, countIf(outcome IN ('test', 'infra')) AS bad
        FROM ({latest_sql("pr_number", "finished_at", backend=True)})"""
        having = "HAVING bad > 0" if failing_only else ""
        params = {"since": since, "event": event, "backend_id": backend_id}
        with clickhouse.session():
            found = select(f"{grouped} GROUP BY pr_number, sha {having} ORDER BY at DESC, sha LIMIT {wanted}", **params)
            if lost:
                shas = sorted({k[1] for k in lost})
                found += select(
                    f"{grouped} WHERE sha IN {{shas:Array(String)}} GROUP BY pr_number, sha", **params, shas=shas
                )
            keyed = {(r["pr_number"], r["sha"]): [r["at"], int(r["bad"]), 0] for r in found}
            for key, at in lost:
                row = keyed.setdefault(key, [at, 0, 0])
                row[0], row[1], row[2] = max(row[0], at), row[1] + 1, row[2] + 1
            keys = [(key, at, n_lost) for key, (at, bad, n_lost) in keyed.items() if bad or not failing_only]
            keys.sort(key=lambda k: k[0][1])
            keys.sort(key=lambda k: k[1], reverse=True)  # stable: newest first, then by SHA, as in the SQL
            keys = keys[offset : offset + q.PER_PAGE + 1]
            has_next = len(keys) > q.PER_PAGE
            keys = keys[: q.PER_PAGE]
            cells = self._cells(backend_id, since, event, [key[1] for key, _, _ in keys])
        titles = {
            pr.number: pr for pr in PullRequest.objects.filter(number__in=[key[0] for key, _, _ in keys if key[0]])
        }
        rows = []
        for (number, sha), at, n_lost in keys:
            pr = titles.get(number)
            row_cells = {c.column: c for c in cells.get((number, sha), [])}
            rows.append(
                q.MatrixRow(number, sha, pr.title if pr else "", pr.author if pr else "", at, n_lost, row_cells)
            )
        return rows, has_next

    def _lost_keys(
        self, *, since: datetime, event: str, backend_id: int
    ) -> list[tuple[tuple[int | None, str], datetime]]:
        d = Dialect()
        sql = (
            "SELECT pr.number AS pr_number, COALESCE(NULLIF(dl.head_sha, ''), dl.delivery_id) AS sha, "
            "dp.created_at AS at" + lost_sql(backend=True, with_pr=True)
        )
        rows = fetch(sql, self._params(d, since, event=event, backend_id=backend_id))
        return [((r["pr_number"], r["sha"]), r["at"]) for r in rows]

    def _cells(self, backend_id: int, since: datetime, event: str, shas: list[str]) -> dict[tuple, list[q.Job]]:
        if not shas:
            return {}
        where = (
            f"backend_id = {{backend_id:UInt64}} AND event_type = {{event:String}} AND finished_at >= {SINCE} "
            f"AND {SHA_KEY} IN {{shas:Array(String)}}"
        )
        sql = f"""
        SELECT {JOB_FIELDS} FROM {matching(where)}
        ORDER BY created_at DESC, run_attempt DESC, id DESC LIMIT 1 BY {SHA_KEY}, workflow_name, job_name"""
        result: dict[tuple, list[q.Job]] = defaultdict(list)
        for r in select(sql, backend_id=backend_id, event=event, since=since, shas=shas):
            job = job_from_row(r)
            result[(job.pr_number, job.head_sha or job.delivery_id)].append(job)
        return result

    def pr_detail(self, *, number: int, backends: list[q.BackendInfo]) -> q.PrDetail | None:
        pr = PullRequest.objects.filter(upstream_repo=settings.UPSTREAM_REPO, number=number).first()
        sql = f"SELECT {JOB_FIELDS} FROM {matching(PR_JOBS)}"
        with clickhouse.session():
            rows = [job_from_row(r) for r in select(sql, number=number)]
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
            latest: dict[tuple, q.Job] = {}
            for j in mine:
                if j.head_sha == head:
                    latest.setdefault(latest_key(j), j)
            current = sorted(latest.values(), key=lambda j: (_pr_order(j.outcome), q.natural_key(j.column)))
            shown = {j.id for j in current}
            earlier = [j for j in mine if j.id not in shown]
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

    def job_detail(self, *, backend_id: int, job_id: int) -> q.JobDetail | None:
        with clickhouse.session():
            found = select(
                f"SELECT {JOB_FIELDS} FROM {matching('backend_id = {backend_id:UInt64} AND id = {id:UInt64}')}",
                backend_id=backend_id,
                id=job_id,
            )
            if not found:
                return None
            j = job_from_row(found[0])
            same = select(
                f"SELECT {JOB_FIELDS} FROM {matching(SAME_JOB)}",
                backend_id=backend_id,
                event=j.event_type,
                workflow=j.workflow_name,
                job=j.job_name,
                sha=j.head_sha,
                delivery=j.delivery_id,
            )
        attempts = sorted((job_from_row(r) for r in same), key=newest_first, reverse=True)
        title = ""
        if j.pr_number:
            title = PullRequest.objects.filter(number=j.pr_number).values_list("title", flat=True).first() or ""
        return q.JobDetail(j, attempts, title)


def _pr_order(outcome_: str) -> int:
    return {"test": 0, "infra": 0, "running": 1}.get(outcome_, 2)
