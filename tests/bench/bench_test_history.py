"""Server time of the test page and the test search: 10 million cases in ClickHouse (chdb), 1 million in PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ootci_thbench \\
        .venv/bin/pytest -s -p no:xdist -p no:cacheprovider tests/bench/bench_test_history.py

Runs in its own test database (suffix ``_thbench``). The 12 bench backends (tests/bench/data.py) run the same
TESTS generic test ids in every report, as PyTorch's suites do; reports spread evenly over 30 days, one backend
after another, 12 consecutive reports sharing an upstream SHA (7 in 10 a PR head); 1 % of the cases fail with a
message, 2.5 % are skipped. ClickHouse gets CH_CASES cases (CH_CASES / TESTS reports) generated inside it by
``INSERT … SELECT FROM numbers()`` and merged (``OPTIMIZE … FINAL``, as after a backfill); PostgreSQL gets PG_CASES
(with their TestReport and JobResult rows) by ``INSERT … SELECT FROM generate_series``, its trigram index (migration
ootci 0010) kept up as rows arrive, then the search's daily roll-up filled by the migration that fills it (ootci 0038).

Prints for each store the median of RUNS runs after a warm-up of ``hud.figures.queries`` (the figures: ClickHouse inside
one open session) and of the whole request through the test client (template rendering included; on chdb a request
finds the engine the one before it kept open, ``clickhouse.CHDB_LINGER``, except "first after a pause", which starts
it again). Target: under 300 ms, asserted with a margin for the shared machine (under 300 / 0.8 = 375 ms). Then each
store's search before its roll-up (the cases, tests/hud/history/cases_search.py) and after it, interleaved: a before
and an after call in turn, on ClickHouse over 7 and 30 days.
"""

import importlib
import os
import statistics
import time
from datetime import timedelta
from urllib.parse import quote

import pytest
from django.apps import apps
from django.db import connection
from django.utils import timezone
from pytest_django.fixtures import _set_suffix_to_test_databases

from hud.history import assembly
from hud.history import queries as history_queries
from hud.stores import fallback
from hud.stores.base import since
from hud.stores.clickhouse import case_table, copy_cases
from hud.stores.clickhouse import connection as clickhouse
from hud.stores.clickhouse.history import ClickHouseStore
from hud.stores.db.history import DatabaseStore
from ootci.models import Backend, JobResult, TestDay, TestReport
from tests.bench.data import BACKENDS, median_ms
from tests.hud.history import cases_search

CH_CASES = int(os.environ.get("BENCH_CH_CASES", 10_000_000))
PG_CASES = int(os.environ.get("BENCH_PG_CASES", 1_000_000))
TESTS = 5_000
DAYS = 30
RUNS = int(os.environ.get("BENCH_RUNS", 5))
TARGET_MS = 300
MARGIN = 0.8  # a shared 2-core machine

TEST_ID = "test/test_ops{file}.py::TestCommon{{DEVICE}}::test_op_{n}_{{device}}_float32"
PROBE = TEST_ID.format(file=4321 % 20, n=4321)  # fails 1 % of the time, on every backend
SEARCHES = {
    "search, 11 tests match (test_op_432)": "test_op_432",
    "search, 1 test matches": "test_ops1.py::TestCommon{DEVICE}::test_op_4321_",
    "search, every test matches (float32)": "float32",
}


@pytest.fixture(scope="session")
def django_db_modify_db_settings():
    _set_suffix_to_test_databases("thbench")


# Shared shape of a case, by report r (0…) and test n (0…TESTS-1): SQL expressions both stores' generators use.
def case_shape(mod: str) -> dict[str, str]:
    """``mod``: the modulo operator as the statement is written (``%%`` where psycopg binds ``%(name)s``)."""
    return {"failing": f"(n * 7 + r) {mod} 100 = 0", "skipped": f"(n + r) {mod} 40 = 3", "pr": f"r {mod} 10 < 7"}


CH_INSERT = """
INSERT INTO {table} (generic_id, backend_id, reported_at, report_id, ordinal, backend_repo, job_id, event_type,
    pr_number, job_sha, workflow_name, job_name, file, classname, name, status, duration, reruns, message, version)
SELECT concat('test/test_ops', toString(n % 20), '.py::TestCommon{{DEVICE}}::test_op_', toString(n),
              '_{{device}}_float32'),
       backend_ids[1 + r % length(backend_ids)],
       {{now:DateTime64(6, 'UTC')}} - toIntervalMicrosecond(toUInt64(({reports} - r) * {step_us})),
       1000000 + r, n, backend_repos[1 + r % length(backend_ids)], 1000000 + r,
       if({pr}, 'pull_request', 'nightly'), if({pr}, toUInt32(100000 + intDiv(r, 12)), NULL),
       lower(hex(MD5(toString(intDiv(r, 12))))), 'ci', 'test', concat('test/test_ops', toString(n % 20), '.py'),
       'test_ops.TestCommonPRIVATEUSE1', concat('test_op_', toString(n), '_npu_float32'),
       multiIf({failing}, 'failed', {skipped}, 'skipped', 'passed'), 0.1, if({failing} AND r % 3 = 0, 1, 0),
       if({failing}, concat('AssertionError: Tensor-likes are not close!', repeat('\\nMismatched elements', 20)), ''),
       1
FROM (SELECT intDiv(number, {tests}) AS r, number % {tests} AS n, {{ids:Array(UInt64)}} AS backend_ids,
             {{repos:Array(String)}} AS backend_repos FROM numbers({rows}))
"""

PG_JOBS = """
INSERT INTO ootci_jobresult
    (backend_id, delivery_id, event_type, upstream_repo, pr_number, head_sha, workflow_name, job_name, run_id,
     run_attempt, check_run_id, status, conclusion, started_at, completed_at, failed_tests, artifact_url, run_url,
     level, one_shot, relay_decided, source, failure_class, verdict, sha_check, auto_retry_note, environment,
     created_at, updated_at)
SELECT (%(ids)s::bigint[])[1 + r %% 12], md5(r::text), CASE WHEN {pr} THEN 'pull_request' ELSE 'nightly' END,
       'pytorch/pytorch', CASE WHEN {pr} THEN 100000 + r / 12 END, md5((r / 12)::text), 'ci', 'test', r::text, 1, '',
       'completed', 'failure', at - interval '1 hour', at, '[]'::jsonb, '', '', 'L2', false, false, 'callback', '',
       '', '', '', '{{}}'::jsonb,
       at - interval '1 hour', at
FROM (SELECT r, %(now)s - make_interval(secs => (%(reports)s - r) * %(step)s) AS at
      FROM generate_series(0, %(reports)s - 1) AS r) AS reports
"""
PG_REPORTS = """
INSERT INTO ootci_testreport (job_id, source, digest, size, content_type, content_encoding, store_key, state, reason,
    cases, passed, failed, errors, skipped, xfailed, xpassed, reruns, duration, received_at, parsed_at, artifact_name,
    replaced)
SELECT id, 'upload', md5(id::text), 1, '', '', 'bench/' || id, 'parsed', '', %(tests)s, 0, 0, 0, 0, 0, 0, 0, 0,
       completed_at, completed_at, '', false
FROM ootci_jobresult
"""
PG_CASES_SQL = """
INSERT INTO ootci_testcase (report_id, job_id, file, classname, name, test_id, status, duration, reruns, message)
SELECT rep.id, rep.job_id, 'test/test_ops' || (n %% 20) || '.py', 'test_ops.TestCommonPRIVATEUSE1',
       'test_op_' || n || '_npu_float32',
       'test/test_ops' || (n %% 20) || '.py::TestCommon{{DEVICE}}::test_op_' || n || '_{{device}}_float32',
       CASE WHEN {failing} THEN 'failed' WHEN {skipped} THEN 'skipped' ELSE 'passed' END, 0.1,
       CASE WHEN {failing} AND r %% 3 = 0 THEN 1 ELSE 0 END,
       CASE WHEN {failing} THEN 'AssertionError: Tensor-likes are not close!' || repeat(E'\\nMismatched elements', 20)
            ELSE '' END
FROM (SELECT id, job_id, row_number() OVER (ORDER BY id) - 1 AS r FROM ootci_testreport) AS rep,
     generate_series(0, %(tests)s - 1) AS n
"""


def seed_clickhouse(backends: list[Backend], now) -> float:
    reports = CH_CASES // TESTS
    sql = CH_INSERT.format(
        table=copy_cases.TABLE,
        reports=reports,
        step_us=DAYS * 86400 * 10**6 // reports,
        tests=TESTS,
        rows=reports * TESTS,
        **case_shape("%"),
    )
    began = time.perf_counter()
    with clickhouse.session():
        case_table.ensure_schema()
        clickhouse.command(sql, {"now": now, "ids": [b.pk for b in backends], "repos": [b.repo for b in backends]})
        inserted = time.perf_counter() - began
        clickhouse.command(f"OPTIMIZE TABLE {copy_cases.TABLE} FINAL")
        clickhouse.remove_leftover_parts()
        count = clickhouse.rows(f"SELECT count() FROM {copy_cases.TABLE}")[0][0]
        merged = time.perf_counter() - began
        # The search's daily roll-up, as the copy keeps it after each batch (here every day at once).
        copy_cases.days_refresh({(now - timedelta(days=d)).date() for d in range(DAYS + 2)})
        clickhouse.command(f"OPTIMIZE TABLE {case_table.DAY_TABLE} FINAL")
        days = clickhouse.rows(f"SELECT count() FROM {case_table.DAY_TABLE}")[0][0]
        rolled = time.perf_counter() - began - merged
        # What the copy adds to each batch it sends: the refresh of the batch's day (today's cases, re-aggregated).
        refresh = median_ms(lambda: copy_cases.days_refresh({now.date()}), 3)
    print(f"\nClickHouse: {count:,} cases inserted in {inserted:.1f} s, merged in {merged:.1f} s; ", end="")
    print(f"{days:,} roll-up rows in {rolled:.1f} s; one day's refresh {refresh:.0f} ms")
    return count


def seed_postgresql(backends: list[Backend], now) -> None:
    reports = PG_CASES // TESTS
    shape = case_shape("%%")
    began = time.perf_counter()
    with connection.cursor() as db:
        params = {"ids": [b.pk for b in backends], "now": now, "reports": reports, "tests": TESTS}
        db.execute(PG_JOBS.format(**shape), params | {"step": DAYS * 86400 / reports})
        db.execute(PG_REPORTS, params)
        db.execute(PG_CASES_SQL.format(**shape), params)
        for table in ("ootci_jobresult", "ootci_testreport", "ootci_testcase"):
            db.execute(f"ANALYZE {table}")
    took = time.perf_counter() - began
    print(f"PostgreSQL: {JobResult.objects.count():,} jobs, {TestReport.objects.count():,} reports, ", end="")
    print(f"{PG_CASES:,} cases in {took:.1f} s (trigram index included)")
    began = time.perf_counter()
    importlib.import_module("ootci.migrations.0038_testday_fill").fill(apps, None)
    with connection.cursor() as db:
        db.execute("ANALYZE ootci_testday")
    print(f"PostgreSQL: {TestDay.objects.count():,} roll-up rows filled in {time.perf_counter() - began:.1f} s")


class CasesSearch:
    """The search as it read every case before the roll-up (the "before" of ``before_and_after``)."""

    def search_rows(self, **kwargs) -> list[dict]:
        return cases_search.search_rows(**kwargs)


class ClickHouseCasesSearch:
    """ClickHouse's search as it read every case before its roll-up (the "before" of ``before_and_after``)."""

    def search_rows(self, **kwargs) -> list[dict]:
        return cases_search.clickhouse_search_rows(**kwargs)


def before_and_after(before, after, *, days: tuple[int, ...] = (7,)) -> dict[str, tuple[float, float]]:
    """Median ms of the search's figures from the store ``before`` and the store ``after``, one call of each in turn,
    over each window of ``days``."""
    figures = {}
    for name, text in SEARCHES.items():
        for page in (1, 40) if text == "float32" else (1,):
            for window in days:
                stores = (before, after)
                ask = {"text": text, "days": window, "page": page}
                found = [assembly.search(store, since=since(window), **ask) for store in stores]  # the same answer
                assert found[0] == found[1], name
                timings = ([], [])
                for _ in range(RUNS):
                    for store, timed in zip(stores, timings, strict=True):
                        start = time.perf_counter()
                        assembly.search(store, since=since(window), **ask)
                        timed.append((time.perf_counter() - start) * 1000)
                label = f"{name}, page {page}" + (f", {window} days" if len(days) > 1 else "")
                figures[label] = (statistics.median(timings[0]), statistics.median(timings[1]))
    return figures


def timed_calls(client) -> dict:
    page = f"/oot/tests/{quote(PROBE)}/"

    def get(path):
        response = client.get(path)
        assert response.status_code == 200, path
        assert fallback.fallback_reason() == ""

    calls = {
        "test page, 7 days: figures": lambda: history_queries.page(generic_id=PROBE, days=7),
        "test page, 7 days: request": lambda: get(page),
        "test page, 7 days: first after a pause": lambda: (clickhouse.release(), get(page)),
        "test page, 30 days: request": lambda: get(page + "?days=30"),
        "test page API, 7 days: request": lambda: get("/api" + page),
    }
    for name, text in SEARCHES.items():
        calls[f"{name}: figures"] = lambda text=text: history_queries.search(text=text, days=7, page=1)
        calls[f"{name}: request"] = lambda text=text: get(f"/oot/tests/?q={quote(text)}")
    calls["search float32, page 40: request"] = lambda: get("/oot/tests/?q=float32&page=40")
    calls["search float32, 30 days: request"] = lambda: get("/oot/tests/?q=float32&days=30")
    return calls


@pytest.mark.django_db
def test_test_history_on_clickhouse_and_postgresql(client, settings, tmp_path):
    settings.HUD_CACHE_SECONDS = 0
    url = f"chdb://{tmp_path / 'clickhouse'}"
    backends = [Backend.objects.create(repo=repo, level=level, device=device) for repo, level, device in BACKENDS]
    now = timezone.now() - timedelta(minutes=1)
    settings.CLICKHOUSE_URL = url
    seed_clickhouse(backends, now)
    settings.CLICKHOUSE_URL = ""
    seed_postgresql(backends, now)

    figures = {}
    for store, setting in (("ClickHouse", url), ("PostgreSQL", "")):
        settings.CLICKHOUSE_URL = setting
        for name, call in timed_calls(client).items():
            if name.endswith("figures"):
                with fallback.unit_of_work():
                    figures[store, name] = median_ms(call, RUNS)
            else:
                figures[store, name] = median_ms(call, RUNS)
    settings.CLICKHOUSE_URL = url
    with fallback.unit_of_work():
        shown = history_queries.page(generic_id=PROBE, days=7)
        found = history_queries.search(text="float32", days=7, page=1)
    print(f"probe {PROBE}: {len(shown.backends)} backends × {len(shown.columns)} columns; ", end="")
    print(f"{sum(b.runs for b in shown.backends)} results in 7 days; 'float32' page 1: {len(found.hits)} tests")

    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'':<44} {f'ClickHouse {CH_CASES / 1e6:g}M':>16} {f'PostgreSQL {PG_CASES / 1e6:g}M':>16}")
    for name in timed_calls(client):
        ch, pg = figures["ClickHouse", name], figures["PostgreSQL", name]
        marks = "" if max(ch, pg) <= TARGET_MS else f"  over {TARGET_MS} ms"
        print(f"{name:<44} {ch:14.1f}ms {pg:14.1f}ms{marks}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")

    print(f"\nClickHouse search figures, before (the cases) and after (the roll-up), interleaved, median of {RUNS}:")
    with clickhouse.session():
        compared = before_and_after(ClickHouseCasesSearch(), ClickHouseStore(), days=(7, 30))
    for name, (before, after) in compared.items():
        print(f"{name:<56} {before:10.1f}ms {after:10.1f}ms")
    settings.CLICKHOUSE_URL = ""
    print(f"\nPostgreSQL search figures, before (the cases) and after (the roll-up), interleaved, median of {RUNS}:")
    for name, (before, after) in before_and_after(CasesSearch(), DatabaseStore()).items():
        print(f"{name:<44} {before:14.1f}ms {after:14.1f}ms")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    slow = {key: round(ms) for key, ms in figures.items() if ms > TARGET_MS / MARGIN}
    assert not slow, f"over {TARGET_MS} ms / {MARGIN}: {slow}"
