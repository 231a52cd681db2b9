"""Replication throughput to ClickHouse (chdb): a full backfill of BENCH_ROWS job results, then an
incremental run after a burst of updates and inserts. Prints rows/s for both.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ootci_bench \
        .venv/bin/pytest -s tests/bench/bench_clickhouse_replication.py
"""

import os
import time

import pytest
from django.db import connection
from django.utils import timezone

from hud.stores.clickhouse import connection as clickhouse
from hud.stores.clickhouse import copy_jobs
from ootci.models import JobResult
from tests.bench.data import seed_job_results

ROWS = int(os.environ.get("BENCH_ROWS", 1_000_000))
BURST = ROWS // 20


@pytest.mark.django_db
def test_replication_throughput(settings, tmp_path):
    settings.CLICKHOUSE_URL = f"chdb://{tmp_path / 'clickhouse'}"
    began = time.perf_counter()
    seeded = seed_job_results(ROWS)
    print(f"\nseeded {seeded.job_results:,} job results in PostgreSQL in {time.perf_counter() - began:.1f} s")

    began = time.perf_counter()
    sent = copy_jobs.replicate(batch_size=copy_jobs.BATCH_SIZE)
    full = time.perf_counter() - began
    assert sent == ROWS
    print(f"backfill:    {sent:,} rows in {full:.1f} s = {sent / full:,.0f} rows/s")

    # A burst of writes: half updates of in-progress jobs completing, half new jobs.
    now = timezone.now()
    updated = JobResult.objects.filter(
        pk__in=JobResult.objects.filter(status="in_progress").values("pk")[: BURST // 2]
    ).update(status="completed", conclusion="success", completed_at=now, updated_at=now)
    # clock_timestamp(), not now(): the test's transaction began before the backfill, and a row stamped that
    # long before it is visible is outside the replication overlap by design.
    with connection.cursor() as db:
        db.execute(
            """
            INSERT INTO ootci_jobresult
                (backend_id, delivery_id, event_type, upstream_repo, pr_number, head_sha, workflow_name,
                 job_name, run_id, run_attempt, check_run_id, status, conclusion, failed_tests, artifact_url,
                 run_url, level, one_shot, relay_decided, source, failure_class, verdict, sha_check,
                 auto_retry_note, environment, started_at, created_at, updated_at)
            SELECT backend_id, delivery_id, event_type, upstream_repo, pr_number, head_sha, workflow_name,
                   job_name, run_id || '-new', run_attempt, check_run_id, 'in_progress', '', '[]', '', run_url,
                   level, false, false, 'callback', '', '', '', '', '{}', clock_timestamp(), clock_timestamp(),
                   clock_timestamp()
            FROM ootci_jobresult ORDER BY id LIMIT %s
            """,
            [BURST - updated],
        )
    began = time.perf_counter()
    sent = copy_jobs.replicate()
    incremental = time.perf_counter() - began
    assert sent >= BURST
    print(
        f"incremental: {sent:,} rows ({updated:,} updated, {BURST - updated:,} new) in {incremental:.2f} s = "
        f"{sent / incremental:,.0f} rows/s"
    )

    live = clickhouse.select(f"SELECT count() AS n FROM {clickhouse.TABLE} FINAL")[0]["n"]
    assert live == ROWS + BURST - updated
