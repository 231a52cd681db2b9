"""ClickHouse replication against the real embedded engine (chdb) and PostgreSQL."""

import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from django_q import signing
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import Schedule

from hud import tasks
from hud.figures import queries
from hud.models import ReplicationCursor
from hud.stores import fallback
from hud.stores.clickhouse import connection as clickhouse
from hud.stores.clickhouse import copy_jobs
from ootci import replication
from ootci.models import JobResult
from tests.schedules import schedules_installed

FIELDS = [c for c in copy_jobs.COLUMNS if not c.startswith("backend_") or c == "backend_id"]


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
    return clickhouse.select(f"SELECT * FROM {clickhouse.TABLE} FINAL ORDER BY id")


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
    return ReplicationCursor.objects.get(name=copy_jobs.CURSOR_NAME)


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
        assert row["version"] == copy_jobs._micros(want["updated_at"])
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


def newer_finished(*jobs: JobResult) -> list[datetime | None]:
    """Each job's stored newer_finished_at (None: the epoch, no newer attempt)."""
    sql = f"SELECT id, newer_finished_at FROM {clickhouse.TABLE} FINAL"
    found = {r["id"]: r["newer_finished_at"] for r in clickhouse.select(sql)}
    return [None if found[j.pk] == datetime(1970, 1, 1, tzinfo=UTC) else found[j.pk] for j in jobs]


def attempts(make_job, count: int, **fields) -> list[JobResult]:
    """``count`` attempts of one job, the later ones newer, each finished an hour after the one before."""
    found = []
    for n in range(count):
        at = datetime(2026, 3, 1, 12, tzinfo=UTC) + timedelta(hours=n)
        same = {"head_sha": "a" * 40, "delivery_id": "delivery-a", "pr_number": 7, "run_id": "1"} | fields
        found.append(
            make_job(
                **same,
                run_attempt=n + 1,
                created_at=at,
                started_at=at,
                status="completed",
                conclusion="success",
                completed_at=at + timedelta(minutes=30),
            )
        )
    return found


def test_each_row_knows_when_the_newer_attempts_of_its_job_finished(chdb, make_job):
    first, second, third = attempts(make_job, 3)
    other = make_job(head_sha="a" * 40, job_name="other-job")  # same SHA, another job

    tasks.clickhouse_replicate()

    assert newer_finished(first, second, third, other) == [third.completed_at, third.completed_at, None, None]
    assert not clickhouse.select(f"SELECT id FROM {clickhouse.TABLE} FINAL WHERE newer_finished_at IS NULL")


def test_a_newer_attempt_that_completes_updates_the_attempts_before_it(chdb, make_job):
    first, second = attempts(make_job, 2)
    second.status, second.conclusion, second.completed_at = "in_progress", "", None
    second.save()
    tasks.clickhouse_replicate()
    assert newer_finished(first) == [second.started_at]  # still running: its finish time is its start
    age(first, by=timedelta(days=1))  # not sent again

    second.status, second.conclusion = "completed", "failure"
    second.completed_at = second.started_at + timedelta(hours=2)
    second.save()
    tasks.clickhouse_replicate()

    assert newer_finished(first, second) == [second.completed_at, None]


def test_a_late_head_sha_moves_a_row_to_its_job_and_the_attempt_left_behind_is_latest_again(chdb, make_job):
    first, second = attempts(make_job, 2, head_sha="", pr_number=None)  # keyed by their delivery
    tasks.clickhouse_replicate()
    assert newer_finished(first, second) == [second.completed_at, None]
    age(first, by=timedelta(days=1))  # not sent again: only the moved row tells that its old job changed

    second.head_sha = "b" * 40
    second.save()
    tasks.clickhouse_replicate()

    assert newer_finished(first, second) == [None, None]


def test_pruning_a_deleted_newest_attempt_makes_the_one_before_latest(chdb, make_job):
    first, second = attempts(make_job, 2)
    tasks.clickhouse_replicate()

    second.delete()
    assert copy_jobs.prune_deleted() == 1

    assert newer_finished(first) == [None]


def insert_as_a_run_does(ch) -> None:
    """Every JobResult, inserted as replicate() inserts a batch, before it computes newer_finished_at."""
    ch.insert(
        clickhouse.TABLE,
        copy_jobs._read_batch(after=None, limit=100),
        column_names=copy_jobs.INSERT_COLUMNS,
    )


def test_rows_a_stopped_run_left_without_their_value_get_it_from_the_next_run(chdb, make_job):
    first, second = attempts(make_job, 2)
    copy_jobs.ensure_schema()
    with clickhouse.client() as ch:
        insert_as_a_run_does(ch)
    copy_jobs.reset_cursor()  # the run did not advance

    tasks.clickhouse_replicate()

    assert newer_finished(first, second) == [second.completed_at, None]


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
            db.execute("SELECT pg_advisory_lock(%s)", [copy_jobs._LOCK_KEY])
        assert tasks.clickhouse_replicate() == 0
        assert not ReplicationCursor.objects.filter(last_id__gt=0).exists()
        with other.cursor() as db:  # before closing: the server may release a closed session's locks a little later
            db.execute("SELECT pg_advisory_unlock(%s)", [copy_jobs._LOCK_KEY])
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
    chdb, make_job, django_capture_on_commit_callbacks, monkeypatch
):
    monkeypatch.setattr(Conf, "SYNC", False)  # queued, as in production, not run at once as the tests' Q_SYNC does
    broker = get_broker()
    broker.purge_queue()
    replication.replication_started()  # no flag left over from another test
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        jobs = [make_job() for _ in range(3)]
        for _ in jobs:
            replication.job_results_changed()
        assert broker.queue_size() == 0  # nothing before commit

    assert broker.queue_size() == 1  # three writes, one task
    queued = broker.dequeue()
    assert [signing.SignedPackage.loads(task)["func"] for _, task in queued] == ["hud.tasks.clickhouse_replicate"]
    for ack_id, _ in queued:
        broker.acknowledge(ack_id)
    tasks.clickhouse_replicate()  # what the worker runs
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
    schedules_installed()
    schedule = Schedule.objects.get(name="hud: replicate job results to ClickHouse")
    assert (schedule.func, schedule.schedule_type, schedule.minutes) == (
        "hud.tasks.clickhouse_replicate",
        Schedule.MINUTES,
        1,
    )
    module, _, name = schedule.func.rpartition(".")
    assert callable(getattr(__import__(module, fromlist=[name]), name))


# A process that tries to open the directory once per line it reads, and says whether it could.
OPENER = """
import sys
import time
import clickhouse_connect
for _ in sys.stdin:
    try:
        c = clickhouse_connect.get_client(interface="chdb", path=sys.argv[1])
    except Exception:
        print("held", flush=True)
    else:
        c.close()
        print("open", flush=True)
"""


@pytest.fixture
def opener(chdb):
    """Another process, ready (its imports done) to try the directory on ``opener()``."""
    child = subprocess.Popen(
        [sys.executable, "-c", OPENER, str(chdb)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )

    def attempt() -> str:
        child.stdin.write("\n")
        child.stdin.flush()
        return child.stdout.readline().strip()

    yield attempt
    child.stdin.close()
    child.wait(timeout=30)


def test_a_hud_request_keeps_the_engine_open_for_the_next_then_lets_another_process_have_it(
    chdb, make_job, client, opener, monkeypatch
):
    monkeypatch.setattr(clickhouse, "CHDB_LINGER", 1.5)
    make_job()
    tasks.clickhouse_replicate()
    assert opener() == "open"  # the replication's unit of work let the directory go

    assert client.get("/oot/").status_code == 200
    kept = clickhouse._lingering.client
    assert kept is not None
    assert opener() == "held"
    assert client.get("/api/oot/").status_code == 200
    assert clickhouse._lingering.client is kept  # the next request started no engine of its own

    time.sleep(1.0)
    assert client.get("/oot/").status_code == 200
    time.sleep(0.8)  # over CHDB_LINGER after the first request, 0.8 s after the last
    assert opener() == "held"
    time.sleep(1.2)
    assert clickhouse._lingering.client is None
    assert opener() == "open"


def test_a_request_after_chdb_hold_lets_the_engine_go_so_a_waiting_process_gets_it(
    chdb, make_job, client, opener, monkeypatch
):
    monkeypatch.setattr(clickhouse, "CHDB_LINGER", 30.0)
    monkeypatch.setattr(clickhouse, "CHDB_HOLD", 0.5)
    make_job()
    tasks.clickhouse_replicate()
    assert client.get("/oot/").status_code == 200
    assert opener() == "held"

    time.sleep(0.6)
    assert client.get("/oot/").status_code == 200  # open for CHDB_HOLD now: closed at its end, nothing kept
    assert opener() == "open"
    assert client.get("/oot/").status_code == 200  # and none kept for CHDB_LINGER after that
    assert opener() == "open"


def test_a_task_does_not_keep_the_engine(chdb, make_job, opener):
    make_job()
    with fallback.unit_of_work():  # the figure refresh's unit of work, in the worker
        queries.overview(days=7, event="pull_request")
        assert opener() == "held"  # read from ClickHouse
    assert clickhouse._lingering.client is None
    assert opener() == "open"
