"""manage.py clickhouse_schema and backfill_clickhouse against the embedded engine (chdb)."""

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from hud.stores.clickhouse import connection as clickhouse
from hud.stores.clickhouse import copy_jobs
from ootci.models import JobResult


@pytest.fixture
def chdb(settings, tmp_path):
    settings.CLICKHOUSE_URL = f"chdb://{tmp_path / 'clickhouse'}"


@pytest.fixture
def old_jobs(make_backend):
    """Five job results last written days ago, outside the replication overlap."""
    backend = make_backend("apple/mps-ci", level="L3", device="mps")
    jobs = [
        JobResult.objects.create(
            backend=backend,
            delivery_id=f"d{n}",
            event_type="push",
            upstream_repo="pytorch/pytorch",
            workflow_name="mps",
            job_name="test-mps",
            run_id=str(n),
            status="completed",
            conclusion="success",
            completed_at=datetime(2026, 1, n + 1, tzinfo=UTC),
        )
        for n in range(5)
    ]
    for n, job in enumerate(jobs):
        JobResult.objects.filter(pk=job.pk).update(updated_at=timezone.now() - timedelta(days=10 - n))
    return jobs


def ids() -> list[int]:
    return [r["id"] for r in clickhouse.select(f"SELECT id FROM {clickhouse.TABLE} FINAL ORDER BY id")]


def backfill(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("backfill_clickhouse", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_schema_command_creates_the_table_and_can_run_again(chdb):
    out = StringIO()
    call_command("clickhouse_schema", stdout=out)
    call_command("clickhouse_schema", stdout=out)

    assert out.getvalue().count("oot_workflow_job is ready") == 2
    ddl = clickhouse.select(f"SHOW CREATE TABLE {clickhouse.TABLE}")[0]["statement"]
    assert "ReplacingMergeTree(version, is_deleted)" in ddl
    assert "PARTITION BY toYYYYMM(created_at)" in ddl
    assert "ORDER BY (backend_id, event_type, created_at, id)" in ddl


def test_backfill_copies_everything_with_progress(chdb, old_jobs):
    out, err = backfill("--batch-size", "2")

    assert ids() == [j.pk for j in old_jobs]
    pending = clickhouse.select(f"SELECT count() AS n FROM {clickhouse.TABLE} FINAL WHERE newer_finished_at IS NULL")
    assert pending == [{"n": 0}]  # every row knows whether its job has a newer attempt
    assert "Copied 5 job results" in out
    assert "5/5 rows (100%)" in err
    assert "rows/s" in err and "ETA" in err


def test_backfill_resumes_where_an_interrupted_run_stopped(chdb, old_jobs):
    def interrupt(rows: int) -> None:
        raise KeyboardInterrupt  # the operator's Ctrl-C, after the first batch was accepted

    with pytest.raises(KeyboardInterrupt):
        copy_jobs.replicate(batch_size=2, on_batch=interrupt)
    assert ids() == [old_jobs[0].pk, old_jobs[1].pk]

    out, err = backfill("--batch-size", "2")

    assert "3/3 rows (100%)" in err  # only the rest
    assert ids() == [j.pk for j in old_jobs]


def test_backfill_restart_copies_again_and_marks_deleted_rows(chdb, old_jobs):
    backfill()
    old_jobs[2].delete()

    out, err = backfill("--restart")

    assert "4/4 rows" in err
    assert "marked 1 deleted" in out
    assert ids() == [j.pk for j in old_jobs if j.pk != old_jobs[2].pk]


def test_backfill_says_clearly_when_clickhouse_is_not_set_or_down(settings, old_jobs):
    settings.CLICKHOUSE_URL = ""
    with pytest.raises(CommandError, match="CLICKHOUSE_URL is not set"):
        backfill()

    settings.CLICKHOUSE_URL = "http://user:secret@127.0.0.1:1/ootci"
    with pytest.raises(CommandError, match="Cannot connect to ClickHouse at http://127.0.0.1:1/ootci") as failure:
        backfill()
    assert "secret" not in str(failure.value)
    assert "run the command again" in str(failure.value)


def test_a_table_an_older_version_created_is_refused_until_a_restart_backfill_creates_it_again(chdb, old_jobs):
    # Older versions computed the outcome in ClickHouse: their table has no outcome column to copy into.
    older = "\n".join(line for line in clickhouse.SCHEMA[0].splitlines() if not line.strip().startswith("outcome "))
    with clickhouse.client() as ch:
        ch.command(older)
        ch.insert(clickhouse.TABLE, [[old_jobs[0].pk, old_jobs[0].backend_id]], column_names=["id", "backend_id"])
    with pytest.raises(CommandError, match="backfill_clickhouse --restart"):
        call_command("clickhouse_schema", stdout=StringIO())

    out, err = backfill("--restart")

    assert "Dropped oot_workflow_job" in err
    assert ids() == [j.pk for j in old_jobs]
    copied = clickhouse.select(f"SELECT id, outcome, job_sha FROM {clickhouse.TABLE} FINAL ORDER BY id")
    assert copied == [{"id": j.pk, "outcome": j.outcome, "job_sha": j.job_sha} for j in old_jobs]
    call_command("clickhouse_schema", stdout=StringIO())  # and the schema command is content again
