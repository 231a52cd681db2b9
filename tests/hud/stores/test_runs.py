"""Run times of rolling windows (migration ootci 0045, ``hud.stores.db.runs``): on random histories written by every
path, ``ootci_jobrun`` equals a recount from the job results and ``ootci_jobrunday`` one from it, and the database
store's p50 and p90 per backend equal those of the runs of the newest attempts counted here in Python — exact, also
where many runs take the same time — for windows starting at random times, for every backend and for one."""

import importlib
import random
import threading
from collections import defaultdict
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from hud.stores.db.jobs import DatabaseStore
from ootci.models import Backend, JobResult
from tests.hud.stores.test_rollup import percentile_of, starts, timed_histories
from tests.hud.stores.test_stats_rollup import pr_histories, rows

pytestmark = pytest.mark.django_db
jobrun = importlib.import_module("ootci.migrations.0045_jobrun")
RECOUNT = """
    SELECT backend_id, event_type, pr_number, job_sha, MIN(COALESCE(started_at, created_at)), MAX(finished_at)
    FROM ootci_jobresult WHERE newer_finished_at IS NULL AND outcome <> 'running' GROUP BY 1, 2, 3, 4"""
DAYS_RECOUNT = """
    SELECT event_type, CAST((last_at AT TIME ZONE 'UTC') AS date), backend_id, bucket, COUNT(*) FROM ootci_jobrun
    WHERE last_at IS NOT NULL GROUP BY 1, 2, 3, 4"""
KEPT = """
    SELECT backend_id, event_type, pr_number, job_sha, began, last_at FROM ootci_jobrun WHERE last_at IS NOT NULL"""


def runs_in_python(event: str, since, backend_id: int | None = None) -> dict[int, tuple[float, float]]:
    """Per backend: p50 and p90 of its runs' times, a run being the newest attempts (not running) of one PR and tested
    SHA, from the earliest start (else report time) to the last finish, counted when that finish is at or after
    ``since``."""
    newest: dict[tuple, JobResult] = {}
    for j in JobResult.objects.filter(event_type=event).order_by(*JobResult.LATEST_ORDER):
        newest.setdefault(tuple(getattr(j, f) for f in JobResult.JOB_FIELDS), j)
    runs: dict[tuple, list[JobResult]] = defaultdict(list)
    for j in newest.values():
        if j.outcome != "running" and backend_id in (None, j.backend_id):
            runs[j.backend_id, j.pr_number, j.job_sha].append(j)
    spans = defaultdict(list)
    for (bid, _, _), jobs in runs.items():
        last = max(j.finished_at for j in jobs)
        if last >= since:
            spans[bid].append((last - min(j.started_at or j.created_at for j in jobs)).total_seconds())
    return {bid: (percentile_of(found, 0.5), percentile_of(found, 0.9)) for bid, found in spans.items()}


def runs_kept(event: str, since, backend_id: int | None = None) -> dict[int, tuple[float, float]]:
    windows = {"w": (event, since)}
    found = DatabaseStore().figure_rows(windows=windows, asks=[("run", "w")], backend_id=backend_id)
    return {r["backend_id"]: (r["p50"], r["p90"]) for r in found if r["kind"] == "run:w"}


def assert_runs_as_counted(backends, rng: random.Random) -> None:
    assert rows(KEPT) == rows(RECOUNT)
    assert rows("SELECT * FROM ootci_jobrunday WHERE runs <> 0") == rows(DAYS_RECOUNT)
    for since in starts(rng):
        for event in ("pull_request", "nightly"):
            for bid in (None, backends[0].pk):
                kept, counted = runs_kept(event, since, bid), runs_in_python(event, since, bid)
                assert kept.keys() == counted.keys()
                for b, want in counted.items():
                    assert kept[b] == pytest.approx(want, abs=1e-6), b


@pytest.mark.parametrize("seed", range(4))
def test_the_runs_equal_a_recount_and_give_the_run_times_of_the_newest_attempts(seed):
    backends = pr_histories(seed)

    assert JobResult.objects.filter(event_type="pull_request").values("pr_number", "job_sha").distinct().count() > 5
    assert_runs_as_counted(backends, random.Random(seed))


@pytest.mark.parametrize("seed", range(2))
def test_run_times_are_exact_where_many_runs_take_the_same_time(seed):
    backends = timed_histories(seed)
    rng = random.Random(seed)
    jobs = list(JobResult.objects.all())
    for j in jobs:
        j.started_at = j.completed_at and j.completed_at - timedelta(seconds=rng.choice([60, 60, 60, 3600, 3601]))
    JobResult.objects.bulk_update(jobs, ["started_at"])

    assert_runs_as_counted(backends, rng)


def test_windows_read_in_one_statement_each_get_their_own_runs():
    pr_histories(3)
    rng = random.Random(3)
    windows = {f"w{i}": ("pull_request", since) for i, since in enumerate(starts(rng))}

    found = DatabaseStore().figure_rows(windows=windows, asks=[("run", w) for w in windows])
    for w, (_, since) in windows.items():
        mine = {r["backend_id"]: (r["p50"], r["p90"]) for r in found if r["kind"] == f"run:{w}"}
        want = runs_in_python("pull_request", since)
        assert mine.keys() == want.keys()
        for bid, (p50, p90) in want.items():
            assert mine[bid] == pytest.approx((p50, p90), abs=1e-6)


def test_the_migration_fills_the_table_as_the_triggers_keep_it():
    pr_histories(7)
    with connection.cursor() as db:
        db.execute("DELETE FROM ootci_jobrun; DELETE FROM ootci_jobrunday")
        db.execute(jobrun.FILL)
        db.execute(jobrun.FILL_DAYS)

    assert rows(KEPT) == rows(RECOUNT)
    assert rows("SELECT * FROM ootci_jobrunday") == rows(DAYS_RECOUNT)
    assert rows("SELECT COUNT(*) FROM ootci_jobrun WHERE seconds IS NULL OR bucket IS NULL") == {(0,)}


def test_a_run_that_began_before_the_window_counts_with_its_whole_time(make_backend):
    backend = make_backend("org/long", "L3")
    now = timezone.now()
    for name, began, ended in (("build", 9, 8), ("test", 7, 6)):  # days ago: began 9 days ago, ended 6 days ago
        JobResult.objects.create(
            backend=backend, delivery_id="d", event_type="pull_request", pr_number=1, head_sha="a" * 40,
            workflow_name="ci", job_name=name, run_id="1", run_attempt=1, status="completed", conclusion="success",
            started_at=now - timedelta(days=began), completed_at=now - timedelta(days=ended),
        )  # fmt: skip

    assert runs_kept("pull_request", now - timedelta(days=7)) == {backend.pk: (3 * 86400.0, 3 * 86400.0)}
    assert runs_kept("pull_request", now - timedelta(days=5)) == {}


@pytest.mark.django_db(transaction=True)
def test_two_transactions_writing_attempts_of_one_run_at_once_keep_its_times():
    """The first transaction's attempt is still open when the second's is added (a push: no PR row to lock): the
    second waits for the run's row, then recomputes with the first's attempt, so the run spans both."""
    backend = Backend.objects.create(repo="org/race", level="L2")
    s = connection.settings_dict
    dsn = f"host={s['HOST']} port={s['PORT'] or 5432} user={s['USER']} dbname={s['NAME']}"
    insert = """INSERT INTO ootci_jobresult (backend_id, delivery_id, event_type, upstream_repo, head_sha,
        workflow_name, job_name, run_id, run_attempt, check_run_id, status, conclusion, started_at, completed_at,
        failed_tests, artifact_url, run_url, level, one_shot, relay_decided, source, failure_class, verdict, sha_check,
        auto_retry_note, environment, created_at, updated_at)
        VALUES (%s, 'd', 'push', 'pytorch/pytorch', 'abc', 'ci', %s, '1', 1, '', 'completed', 'success',
        now() - %s * interval '1 h', now() - %s * interval '1 h', '[]', '', '', 'L2', false, false, 'callback', '',
        '', '', '', '{}', now() - interval '1 d', now())"""
    first = psycopg.connect(dsn)
    first.execute(insert, [backend.pk, "build", 5, 4])  # open, not committed: began 5 hours ago
    second = psycopg.connect(dsn, autocommit=True)
    thread = threading.Thread(target=lambda: second.execute(insert, [backend.pk, "test", 2, 1]))
    thread.start()
    thread.join(0.5)
    assert thread.is_alive()  # waiting for the first transaction's row of the run
    first.commit()
    thread.join(10)
    first.close()
    second.close()
    ((seconds,),) = rows(f"SELECT seconds FROM ootci_jobrun WHERE backend_id = {backend.pk}")
    assert seconds == pytest.approx(4 * 3600, abs=5)  # began in the first, ended in the second (their now() apart)
    assert rows(KEPT) == rows(RECOUNT)
    assert rows("SELECT * FROM ootci_jobrunday WHERE runs <> 0") == rows(DAYS_RECOUNT)
