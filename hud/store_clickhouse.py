"""The HUD store on ClickHouse: job-result aggregates from `oot_workflow_job`, everything else from the database.

ClickHouse holds only job results, so the allowlist (backends and their current levels), dispatches (lost and
waiting ones), deliveries, callback rejections and PR titles still come from the database, through the
database store this class extends; what it overrides are the reads over JobResult. Definitions live in
``hud.queries``' docstring and the SQL mirrors ``hud.store_db`` step for step:

- the table is read ``FINAL`` (one row per job result, latest version, deleted ones left out), with the window
  condition in WHERE, which ClickHouse applies after that merge;
- the latest attempt of a job within a window starting at ``since`` is its row with ``finished_at >= since >
  newer_finished_at`` (a column that replication keeps, see ``hud.clickhouse``), so latest attempts are a filter, not a
  grouping by job, and each figure reads its window's on its own;
- the figures of one overview (stats, sparklines, the L3 bar) come from one statement (``figures_sql``), a UNION ALL
  of one SELECT per figure as in the database store, whose rows ``store_db.collect`` reads as it reads the database
  store's;
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
from datetime import datetime
from typing import Any

from django.conf import settings

from hud import clickhouse
from hud import queries as q
from hud.store_db import (
    FIGURE_COLUMNS,
    Ask,
    DatabaseStore,
    Dialect,
    Windows,
    collect,
    fetch,
    latest_key,
    lost_selects,
    lost_sql,
    newest_first,
    outcome,
    seconds,
    window_params,
)
from ootci.models import PullRequest

SHA_KEY = "job_sha"  # the tested SHA of a job (a column derived at insert, see hud.clickhouse)
SINCE = "{since:DateTime64(6, 'UTC')}"
# The outcome (store_db.outcome_sql) as a number, derived at insert: running, success, skipped, test, infra, and 5 for
# a timed-out infrastructure failure.
CODE = "outcome_code"
OUTCOME = "['running', 'success', 'skipped', 'test', 'infra', 'infra'][code + 1]"
JOB_FIELDS = (
    "id, backend_id, event_type, pr_number, head_sha, delivery_id, workflow_name, job_name, run_id, run_attempt, "
    "check_run_id, status, conclusion, started_at, completed_at, created_at, finished_at, queue_time, "
    "execution_time, passed, failed, skipped, failed_tests, run_url, artifact_url, level, upstream_check_run_id, "
    "one_shot, relay_decided, source, upstream_repo"
)
# Attempts of one job as the database store finds them: the same head SHA, or (none reported) the same delivery.
SAME_JOB = (
    "backend_id = {backend_id:UInt64} AND event_type = {event:String} AND workflow_name = {workflow:String} "
    "AND job_name = {job:String} AND head_sha = {sha:String} AND (head_sha != '' OR delivery_id = {delivery:String})"
)
PR_JOBS = "pr_number = {number:UInt32} AND event_type = 'pull_request'"
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


def window_condition(name: str) -> str:
    return f"event_type = {{{name}_event:String}} AND finished_at >= {{{name}_since:DateTime64(6, 'UTC')}}"


def latest_sql(name: str, *, backend: bool = False) -> str:
    """Latest attempts of the jobs finished in window ``name`` (parameters as ``window_parameters``): one row per job,
    with backend_id, sha, pr_number, queue_time, execution_time, finished_at, began, code (CODE), outcome and
    timed_out (1 for a timed-out infrastructure failure). ClickHouse reads only the columns a caller uses."""
    where = f"{window_condition(name)} AND newer_finished_at < {{{name}_since:DateTime64(6, 'UTC')}}"
    if backend:
        where += " AND backend_id = {backend_id:UInt64}"
    return f"""
    SELECT backend_id, {SHA_KEY} AS sha, pr_number, queue_time, execution_time, finished_at,
        coalesce(started_at, created_at) AS began, {CODE} AS code, {OUTCOME} AS outcome, code = 5 AS timed_out
    FROM {in_window(where)}"""


def window_parameters(windows: Windows, **extra: Any) -> dict[str, Any]:
    """Query parameters of ``latest_sql`` (and ``extra``)."""
    found: dict[str, Any] = dict(extra)
    for name, (event, since) in windows.items():
        found[f"{name}_event"], found[f"{name}_since"] = event, since
    return found


def figures_sql(asks: list[Ask], *, backend: bool) -> str:
    """The figure rows (as ``store_db.collect`` reads them) of ``asks``: one SELECT per figure over the latest attempts
    of its window, as ``store_db.figure_selects``, in one statement (ClickHouse runs the parts side by side)."""
    selects = []
    for kind, w in asks:
        latest = f"FROM ({latest_sql(w, backend=backend)})"
        if kind == "stats":
            selects.append(
                figure_select(
                    f"stats:{w}",
                    f"{latest} GROUP BY backend_id",
                    successes="countIf(code = 1)",
                    test_failures="countIf(code = 3)",
                    infra_failures="countIf(code >= 4)",
                    running="countIf(code = 0)",
                    skipped="countIf(code = 2)",
                    timed_out="countIf(code = 5)",
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
            ok, total = "countIf(code = 1)", "countIf(code NOT IN (0, 2))"
            selects.append(figure_select(f"daily:{w}", tail, day="toDate(finished_at)", ok=ok, total=total))
        else:
            span = "dateDiff('microsecond', min(began), max(finished_at)) / 1e6"
            per_pr = f"SELECT backend_id, {span} AS span {latest} WHERE code != 0 GROUP BY backend_id, pr_number, sha"
            tail = f"FROM ({per_pr}) GROUP BY backend_id"
            selects.append(figure_select(f"run:{w}", tail, p90="quantileExactInclusive(0.9)(span)"))
    return " UNION ALL ".join(selects)


def figure_select(kind: str, tail: str, **columns: str) -> str:
    """One SELECT with every column of ``store_db.FIGURE_COLUMNS`` (NULL where ``columns`` gives none)."""
    picked = ", ".join(f"{columns.get(name, 'NULL')} AS {name}" for name in FIGURE_COLUMNS if name != "backend_id")
    return f"SELECT '{kind}' AS kind, backend_id, {picked} {tail}"


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
    def _figures(self, windows: Windows, asks: list[Ask], backend_id: int | None = None) -> dict[Ask, Any]:
        backend = backend_id is not None
        with clickhouse.session():
            rows = select(figures_sql(asks, backend=backend), **window_parameters(windows, backend_id=backend_id))
        d = Dialect()
        lost = lost_selects(d, asks, backend=backend)
        if lost:
            rows += fetch(" UNION ALL ".join(lost), window_params(d, windows, backend_id=backend_id))
        return collect(asks, rows)

    def matrix(
        self, *, backend_id: int, since: datetime, event: str, failing_only: bool, page: int
    ) -> tuple[list[q.MatrixRow], bool]:
        offset = (page - 1) * q.PER_PAGE
        lost = self._lost_keys(since=since, event=event, backend_id=backend_id)
        # The page of the union of ClickHouse's SHA rows and the lost dispatches: ClickHouse's first `wanted` rows,
        # plus the rows of SHAs that also have a lost dispatch (whose time or failure that dispatch may change).
        wanted = offset + q.PER_PAGE + 1
        windows = {"m": (event, since)}
        grouped = f"""
        SELECT pr_number, sha, max(finished_at) AS at, countIf(code >= 3) AS bad
        FROM ({latest_sql("m", backend=True)})"""
        having = "HAVING bad > 0" if failing_only else ""
        params = window_parameters(windows, backend_id=backend_id)
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
            f"AND newer_finished_at < {SINCE} AND {SHA_KEY} IN {{shas:Array(String)}}"
        )
        sql = f"SELECT {JOB_FIELDS} FROM {matching(where)}"  # latest attempts in the window, one per job
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
