"""ClickHouse replication against the real embedded engine (chdb) and PostgreSQL."""

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from django_q.models import Schedule, Task

from hud import clickhouse, tasks
from hud.models import ReplicationCursor
from ootci import replication
from ootci.models import JobResult

FIELDS = [c for c in clickhouse.COLUMNS if not c.startswith("backend_") or c == "backend_id"]


@pytest.fixture
def chdb(settings, tmp_path):
    path = tmp_path / "clickhouse"
    settings.CLICKHOUSE_URL = f"chdb://{path}"
    return path


@pytest.fixture
def make_job(make_backend):
    backend = make_backend("intel/torch-xpu-ops", level="L4", device="xpu")
    counter = iter(range(1, 10_000))

    def make(**fields) -> JobResult:
        n = next(counter)
        values = {
            "backend": backend,
            "delivery_id": f"delivery-{n}",
            "event_type": "pull_request",
            "upstream_repo": "pytorch/pytorch",
            "pr_number": 1000 + n,
            "head_sha": f"{n:040x}",
            "workflow_name": "xpu",
            "job_name": "ut-ops",
            "run_id": str(5000 + n),
            "status": "in_progress",
            "started_at": datetime(2026, 3, 1, 12, 0, n % 60, 123456, tzinfo=UTC),
            "level": "L4",
        }
        return JobResult.objects.create(**(values | fields))

    return make


def stored() -> list[dict]:
    return clickhouse.select(f"SELECT *, finished_at FROM {clickhouse.TABLE} FINAL ORDER BY id")


def as_row(job: JobResult) -> dict:
    job.refresh_from_db()
    row = {name: getattr(job, name) for name in FIELDS if name not in ("version", "failed_tests")}
    return row | {
        "backend_repo": job.backend.repo,
        "backend_level": job.backend.level,
        "backend_device": job.backend.device,
        "failed_tests": json.dumps(job.failed_tests),
        "finished_at": job.finished_at,
    }


def cursor() -> ReplicationCursor:
    return ReplicationCursor.objects.get(name=clickhouse.CURSOR_NAME)


def age(*jobs: JobResult, by: timedelta) -> None:
    """Move rows' updated_at into the past, as if they had been written then."""
    for job in jobs:
        JobResult.objects.filter(pk=job.pk).update(updated_at=timezone.now() - by)


def test_it_copies_every_row_with_every_value(chdb, make_job):
    full = make_job(
        status="completed",
        conclusion="failure",
        completed_at=datetime(2026, 3, 1, 12, 40, 0, 654321, tzinfo=UTC),
        queue_time=12.5,
        execution_time=2400.25,
        passed=120,
        failed=2,
        skipped=3,
        failed_tests=["test_ops.py::test_add", "test_nn.py::test_conv"],
        artifact_url="https://example.org/artifacts/1",
        run_url="https://github.com/intel/torch-xpu-ops/actions/runs/5001",
        check_run_id="777",
        upstream_check_run_id=9_000_000_001,
        one_shot=True,
        source="ingest",
    )
    bare = make_job(event_type="nightly", pr_number=None, started_at=None, level="", run_attempt=2)

    assert tasks.clickhouse_replicate() == 2

    rows = stored()
    expected = [as_row(full), as_row(bare)]
    for row, want in zip(rows, expected, strict=True):
        assert {k: row[k] for k in want} == want
        assert row["version"] == clickhouse._micros(want["updated_at"])
        assert row["is_deleted"] == 0
    assert rows[1]["finished_at"] == expected[1]["created_at"]  # neither started nor completed
    assert cursor().last_id == bare.pk


def test_an_update_replicates_and_collapses_to_one_row(chdb, make_job):
    job = make_job()
    tasks.clickhouse_replicate()
    job.status, job.conclusion, job.completed_at, job.passed = "completed", "success", timezone.now(), 10
    job.save()

    tasks.clickhouse_replicate()
    tasks.clickhouse_replicate()  # twice: nothing new, nothing doubled

    rows = stored()
    assert len(rows) == 1
    assert (rows[0]["status"], rows[0]["conclusion"], rows[0]["passed"]) == ("completed", "success", 10)
    copies = clickhouse.select(f"SELECT count() AS n FROM {clickhouse.TABLE}")[0]["n"]
    assert copies >= 2  # the older copy is still stored until a merge: FINAL is what hides it


def test_it_loses_nothing_while_clickhouse_is_down(chdb, make_job, settings):
    first = make_job()
    tasks.clickhouse_replicate()
    before = cursor()
    later = [make_job(), make_job()]

    settings.CLICKHOUSE_URL = "http://127.0.0.1:1/ootci"
    with pytest.raises(clickhouse.ClickHouseError):
        tasks.clickhouse_replicate()
    after_failure = cursor()
    assert (after_failure.last_updated_at, after_failure.last_id) == (before.last_updated_at, before.last_id)
    assert "127.0.0.1:1" in after_failure.last_error

    settings.CLICKHOUSE_URL = f"chdb://{chdb}"
    tasks.clickhouse_replicate()
    assert [r["id"] for r in stored()] == [first.pk, *(j.pk for j in later)]
    assert cursor().last_id == later[-1].pk
    assert cursor().last_error == ""


def test_a_row_committed_late_is_picked_up_by_the_overlap(chdb, make_job):
    early, late = make_job(), make_job()
    age(early, by=timedelta(seconds=20))
    age(late, by=timedelta(seconds=2))
    tasks.clickhouse_replicate()
    assert cursor().last_id == late.pk

    # A transaction that stamped updated_at 10 s ago commits only now, behind the cursor.
    straggler = make_job()
    age(straggler, by=timedelta(seconds=10))
    tasks.clickhouse_replicate()

    assert {r["id"] for r in stored()} == {early.pk, late.pk, straggler.pk}
    assert cursor().last_id == late.pk  # the cursor never moves back


def test_a_run_returns_at_once_while_another_holds_the_lock(chdb, make_job):
    make_job()
    other = connection.copy()
    try:
        with other.cursor() as db:
            db.execute("SELECT pg_advisory_lock(%s)", [clickhouse._LOCK_KEY])
        assert tasks.clickhouse_replicate() == 0
        assert not ReplicationCursor.objects.filter(last_id__gt=0).exists()
    finally:
        other.close()
    assert tasks.clickhouse_replicate() == 1


def test_the_chdb_directory_is_free_after_a_unit_of_work(chdb, make_job):
    make_job()
    tasks.clickhouse_replicate()

    # Another process (a web server after a worker) can open the directory now and see the rows.
    script = (
        "import clickhouse_connect, sys\n"
        "c = clickhouse_connect.get_client(interface='chdb', path=sys.argv[1])\n"
        "print(c.query('SELECT count() FROM oot_workflow_job FINAL').result_rows[0][0])\n"
        "c.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(chdb)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"


def test_writes_enqueue_one_replication_when_their_transaction_commits(
    chdb, make_job, django_capture_on_commit_callbacks
):
    replication.replication_started()  # no flag left over from another test
    with django_capture_on_commit_callbacks(execute=True) as callbacks, transaction.atomic():
        jobs = [make_job() for _ in range(3)]
        for _ in jobs:
            replication.job_results_changed()
        assert stored_ids_or_none() is None  # nothing before commit

    assert len(callbacks) == 1
    assert Task.objects.filter(func="hud.tasks.clickhouse_replicate").count() == 1
    assert [r["id"] for r in stored()] == [j.pk for j in jobs]


def stored_ids_or_none():
    try:
        return [r["id"] for r in stored()]
    except clickhouse.ClickHouseError:
        return None  # no table yet


def test_writes_enqueue_nothing_without_clickhouse(settings, db, django_capture_on_commit_callbacks):
    settings.CLICKHOUSE_URL = ""
    with django_capture_on_commit_callbacks() as callbacks:
        replication.job_results_changed()
    assert callbacks == []
    assert tasks.clickhouse_replicate() == 0


def test_replication_is_scheduled_every_minute(db):
    schedule = Schedule.objects.get(name="hud: replicate job results to ClickHouse")
    assert (schedule.func, schedule.schedule_type, schedule.minutes) == (
        "hud.tasks.clickhouse_replicate",
        Schedule.MINUTES,
        1,
    )
    module, _, name = schedule.func.rpartition(".")
    assert callable(getattr(__import__(module, fromlist=[name]), name))
