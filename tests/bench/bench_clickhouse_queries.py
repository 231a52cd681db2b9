"""Every HUD query on ClickHouse (chdb) and on PostgreSQL over the same 1,000,000 job results, in one run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ootci_chbench \\
        .venv/bin/pytest -s -p no:cacheprovider tests/bench/bench_clickhouse_queries.py

Seeds BENCH_ROWS job results (default 1,000,000, over 90 days; tests/bench/data.py) plus 20,000 dispatches, a
tenth of them lost, in a test database of its own; copies them to chdb with `replicate()` (printing rows/s) and
merges the table as `backfill_clickhouse` ends (`optimize()`); then times each query function with the figure
cache off: the median of BENCH_RUNS runs after one warm-up, on ClickHouse inside one open session (a page request
opens one; its cost is printed on its own line) and on PostgreSQL, and checks that both give the same figures. On
ClickHouse it also prints the time in ClickHouse statements (the rest: Python and the PostgreSQL reads the
ClickHouse store keeps, such as lost dispatches and relay health). Targets: summary and matrix under 150 ms on
ClickHouse (printed, not asserted: timings depend on the machine and what else runs on it). The PR and job views
read the database whatever the store (``hud.figures.queries.pull_request``): not here.
"""

import os
import statistics
import time

import pytest
from django.utils import timezone
from pytest_django.fixtures import _set_suffix_to_test_databases

from hud.figures import queries
from hud.stores import allowlisted, fallback
from hud.stores.clickhouse import connection as clickhouse
from hud.stores.clickhouse import copy_jobs
from tests.bench.bench_hud import add_dispatches
from tests.bench.data import seed_job_results

ROWS = int(os.environ.get("BENCH_ROWS", 1_000_000))
RUNS = int(os.environ.get("BENCH_RUNS", 5))
TARGET_MS = 150


@pytest.fixture(scope="session")
def django_db_modify_db_settings():
    _set_suffix_to_test_databases("chbench")


class StatementClock:
    """Milliseconds spent in ClickHouse statements (``clickhouse.select``, which the store reads through): the rest of
    a query on the ClickHouse store is Python and the PostgreSQL reads it keeps (allowlist, dispatches, titles)."""

    def __init__(self, monkeypatch):
        self.spent = 0.0
        select = clickhouse.select

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return select(*args, **kwargs)
            finally:
                self.spent += (time.perf_counter() - start) * 1000

        monkeypatch.setattr(clickhouse, "select", timed)


def median_ms(call, clock: StatementClock | None = None) -> tuple[float, float]:
    """The median time of ``call`` over RUNS runs after one warm-up, and the median time in ClickHouse statements."""
    call()
    timings, statements = [], []
    for _ in range(RUNS):
        before = clock.spent if clock else 0.0
        start = time.perf_counter()
        call()
        timings.append((time.perf_counter() - start) * 1000)
        statements.append((clock.spent if clock else 0.0) - before)
    return statistics.median(timings), statistics.median(statements)


@pytest.mark.django_db
def test_hud_queries_on_clickhouse_and_postgresql(settings, tmp_path, monkeypatch):
    settings.HUD_CACHE_SECONDS = 0
    url = f"chdb://{tmp_path / 'clickhouse'}"
    began = time.perf_counter()
    seeded = seed_job_results(ROWS, days=90)
    add_dispatches(20_000)
    print(f"\nseeded {seeded.job_results:,} job results over 90 days in {time.perf_counter() - began:.1f} s")

    settings.CLICKHOUSE_URL = url
    began = time.perf_counter()
    sent = copy_jobs.replicate()
    took = time.perf_counter() - began
    assert sent == seeded.job_results
    print(f"replication: {sent:,} rows in {took:.1f} s = {sent / took:,.0f} rows/s")
    parts = clickhouse.select(f"SELECT count() AS n FROM system.parts WHERE table = '{clickhouse.TABLE}' AND active")
    began = time.perf_counter()
    copy_jobs.optimize()
    print(f"OPTIMIZE FINAL: {parts[0]['n']} parts merged in {time.perf_counter() - began:.1f} s")

    now = timezone.now()
    npu = allowlisted.backend("bench/npu")
    calls = {
        "summary (/oot/, 7 days)": lambda: queries.overview(days=7, event="pull_request", now=now),
        "summary, 30 days": lambda: queries.overview(days=30, event="pull_request", now=now),
        "backend cards": lambda: queries.backend_stats(days=7, event="pull_request", backend_id=npu.id, now=now),
        "matrix (7 days)": lambda: queries.backend_matrix(backend_id=npu.id, days=7, event="pull_request", now=now),
        "matrix, failing, 30 days": lambda: queries.backend_matrix(
            backend_id=npu.id, days=30, event="pull_request", failing_only=True, now=now
        ),
        "matrix, nightly, page 2": lambda: queries.backend_matrix(
            backend_id=npu.id, days=30, event="nightly", page=2, now=now
        ),
        "metrics, 30 days": lambda: queries.metrics(days=30, event="pull_request", now=now),
        "metrics, 90 days": lambda: queries.metrics(days=90, event="pull_request", now=now),
        "readiness": lambda: queries.readiness(now=now),
    }

    opens = []
    for _ in range(RUNS):
        start = time.perf_counter()
        with clickhouse.client() as ch:
            ch.query("SELECT 1")
        opens.append((time.perf_counter() - start) * 1000)
    print(f"chdb open + close, once per request: {statistics.median(opens):.1f} ms")

    clock = StatementClock(monkeypatch)
    print(f"load average before the queries: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'query':<28} {'ClickHouse':>11} {'(in CH SQL)':>11} {'PostgreSQL':>11} {'PG/CH':>7}  same")
    slow = []
    for name, call in calls.items():
        settings.CLICKHOUSE_URL = url
        with fallback.unit_of_work():
            ch_ms, sql_ms = median_ms(call, clock)
            on_clickhouse = call()
            assert fallback.fallback_reason() == "", fallback.fallback_reason()
        settings.CLICKHOUSE_URL = ""
        pg_ms, _ = median_ms(call)
        same = call() == on_clickhouse
        print(
            f"{name:<28} {ch_ms:9.1f}ms {sql_ms:9.1f}ms {pg_ms:9.1f}ms {pg_ms / ch_ms:6.1f}x  {'yes' if same else 'NO'}"
        )
        assert same, name
        if name.startswith(("summary (", "matrix (")) and ch_ms > TARGET_MS:
            slow.append(name)
    verdict = f"over: {', '.join(slow)}" if slow else "met"
    print(f"target (summary and matrix under {TARGET_MS} ms on ClickHouse, whole call): {verdict}")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
