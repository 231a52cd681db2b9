"""What the overview's stats read besides counts (migrations ootci 0043 and 0044, ``hud.stores.db.stats``): on random
histories written by every path, the histogram of queue and run times, the PRs' latest finishes and their count per
day equal a recount from the job results, and the stats' percentiles (exact, from the one bucket holding each rank),
distinct PRs, average run time and last finish equal those of the latest attempts the sort picks, also where many
values share a bucket or are equal (tests/hud/stores/test_rollup.py checks them on its histories too)."""

import random
import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from ootci.models import Backend, JobResult
from tests.hud.builders import job
from tests.hud.stores.test_rollup import kept, recounted, starts, stats_by_sort, stats_kept, timed_histories

pytestmark = pytest.mark.django_db
DAYS = """SELECT *, CAST((finished_at AT TIME ZONE 'UTC') AS date) AS day,
                 CAST((newer_finished_at AT TIME ZONE 'UTC') AS date) AS newer_day FROM ootci_jobresult"""
TIMES_RECOUNT = f"""
    SELECT backend_id, event_type, day, newer_day, ootci_time_bucket(seconds) AS bucket, SUM(queue_n), SUM(run_n)
    FROM (SELECT backend_id, event_type, day, newer_day, queue_time AS seconds, 1 AS queue_n, 0 AS run_n
          FROM ({DAYS}) r WHERE queue_time IS NOT NULL AND (newer_day IS NULL OR newer_day < day)
          UNION ALL
          SELECT backend_id, event_type, day, newer_day, execution_time, 0, 1
          FROM ({DAYS}) r WHERE execution_time IS NOT NULL AND (newer_day IS NULL OR newer_day < day)) AS values_
    GROUP BY 1, 2, 3, 4, 5"""
PRS_RECOUNT = """
    SELECT backend_id, event_type, pr_number, MAX(finished_at) FROM ootci_jobresult
    WHERE pr_number IS NOT NULL AND newer_finished_at IS NULL GROUP BY 1, 2, 3"""


def rows(sql: str) -> set[tuple]:
    with connection.cursor() as db:
        db.execute(sql)
        return set(db.fetchall())


def assert_kept_as_recounted() -> None:
    assert kept() == recounted()
    assert rows("SELECT * FROM ootci_jobtime WHERE queue_n <> 0 OR run_n <> 0") == rows(TIMES_RECOUNT)
    prs = rows("SELECT * FROM ootci_jobpr WHERE last_at IS NOT NULL")
    assert prs == rows(PRS_RECOUNT)
    days = rows(
        "SELECT backend_id, event_type, CAST((last_at AT TIME ZONE 'UTC') AS date), COUNT(*) FROM ootci_jobpr "
        "WHERE last_at IS NOT NULL GROUP BY 1, 2, 3"
    )
    assert rows("SELECT * FROM ootci_jobprday WHERE prs <> 0") == days


def pr_histories(seed: int) -> list[Backend]:
    """``timed_histories(seed)``, then re-runs of some jobs inserted with PRs, finishes moved, PRs changed, deletes."""
    backends = timed_histories(seed)
    rng = random.Random(seed + 100)
    jobs = list(JobResult.objects.all())
    for j in rng.sample(jobs, 25):
        j.pk, j.run_attempt, j.run_id = None, j.run_attempt + 1, f"{j.run_id}-re"
        j.created_at += timedelta(minutes=rng.uniform(1, 600))
        j.completed_at = j.created_at + timedelta(hours=rng.uniform(-30, 30))
        j.pr_number = rng.choice([1, 2, 3, 4])
        j.save()
    ids = list(JobResult.objects.values_list("pk", flat=True))
    for pk in rng.sample(ids, 15):
        JobResult.objects.filter(pk=pk).update(completed_at=timezone.now() - timedelta(hours=rng.uniform(0, 24 * 9)))
    JobResult.objects.filter(pk__in=rng.sample(ids, 10)).update(pr_number=5)
    JobResult.objects.filter(pk__in=rng.sample(ids, 10)).delete()
    return backends


def assert_stats_as_sorted(backends, rng: random.Random) -> None:
    for since in starts(rng):
        for event in ("pull_request", "nightly"):
            for bid in (None, backends[0].pk):
                kept_, by_sort = stats_kept(event, since, bid), stats_by_sort(event, since, bid)
                assert kept_.keys() == by_sort.keys()
                for b, want in by_sort.items():
                    assert kept_[b].pop("last_run") == want.pop("last_run")
                    assert kept_[b] == pytest.approx(want, abs=1e-6), b


@pytest.mark.parametrize("seed", range(4))
def test_the_new_roll_ups_equal_a_recount_and_give_the_stats_of_the_latest_attempts(seed):
    backends = pr_histories(seed)

    assert_kept_as_recounted()
    assert_stats_as_sorted(backends, random.Random(seed))


@pytest.mark.parametrize("seed", range(3))
def test_percentiles_are_exact_where_many_values_share_a_bucket(seed):
    """Times drawn from a few values and narrow ranges: a rank falls deep inside a crowded bucket, among ties."""
    backends = timed_histories(seed)
    rng = random.Random(seed)
    jobs = list(JobResult.objects.all())
    for j in jobs:
        j.queue_time = rng.choice([None, 0.0, 0.0, 5.0, 5.0, 5.01, rng.uniform(300, 301), -1.0])
        j.execution_time = rng.choice([60.0, 60.0, rng.uniform(3600, 3700), 1e7])
    JobResult.objects.bulk_update(jobs, ["queue_time", "execution_time"])

    assert_kept_as_recounted()
    assert_stats_as_sorted(backends, rng)


def test_a_bucket_holds_a_narrow_range_of_times():
    with connection.cursor() as db:
        db.execute(
            "SELECT ootci_time_bucket(x), ootci_time_bucket(x * 1.05), ootci_time_bucket(-1), ootci_time_bucket(0), "
            "ootci_time_bucket(NULL) FROM (VALUES (CAST(1800 AS double precision))) AS v (x)"
        )
        here, further, negative, zero, none = db.fetchone()
    assert further == here + 1 and negative == 0 and zero == 1 and none is None


@pytest.mark.django_db(transaction=True)
def test_two_transactions_writing_attempts_of_one_pr_at_once_keep_its_latest_finish():
    """The first transaction's attempt finished later and is still open when the second's is added: the second waits
    for the PR's row, then recomputes with the first's attempt, so the PR's latest finish is the first's."""
    backend = Backend.objects.create(repo="org/race", level="L2")
    s = connection.settings_dict
    dsn = f"host={s['HOST']} port={s['PORT'] or 5432} user={s['USER']} dbname={s['NAME']}"
    insert = """INSERT INTO ootci_jobresult (backend_id, delivery_id, event_type, upstream_repo, pr_number, head_sha,
        workflow_name, job_name, run_id, run_attempt, check_run_id, status, conclusion, completed_at, failed_tests,
        artifact_url, run_url, level, one_shot, relay_decided, source, failure_class, verdict, sha_check,
        auto_retry_note, environment, created_at, updated_at)
        VALUES (%s, 'd', 'pull_request', 'pytorch/pytorch', 7, 'abc', 'ci', %s, '1', 1, '', 'completed', 'success',
        now() - %s * interval '1 h', '[]', '', '', 'L2', false, false, 'callback', '', '', '', '', '{}',
        now() - interval '1 d', now())"""
    first = psycopg.connect(dsn)
    first.execute(insert, [backend.pk, "build", 1])  # open, not committed: finished an hour ago
    second = psycopg.connect(dsn, autocommit=True)
    thread = threading.Thread(target=lambda: second.execute(insert, [backend.pk, "test", 5]))
    thread.start()
    thread.join(0.5)
    assert thread.is_alive()  # waiting for the first transaction's row of the PR
    first.commit()
    thread.join(10)
    first.close()
    second.close()
    latest = JobResult.objects.get(backend=backend, job_name="build").finished_at
    assert rows(f"SELECT last_at FROM ootci_jobpr WHERE backend_id = {backend.pk}") == {(latest,)}
    assert_kept_as_recounted()


def test_the_stats_list_no_backend_whose_attempts_were_all_removed(make_backend):
    backend = make_backend("org/gone", "L2")
    job(backend, name="build", finished=timezone.now() - timedelta(days=2), queue_time=5.0, execution_time=60.0)
    since = timezone.now() - timedelta(days=7)
    assert set(stats_kept("nightly", since)) == {backend.pk}

    JobResult.objects.filter(backend=backend).delete()

    assert stats_kept("nightly", since) == {} == stats_by_sort("nightly", since)
