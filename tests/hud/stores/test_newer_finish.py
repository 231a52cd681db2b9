"""The latest attempts the database store picks by ``newer_finished_at`` (kept by triggers, migration ootci 0033) are
the ones the sort picks (DISTINCT ON, newest attempt of each job finished in the window), on random histories written
by every path: single and bulk inserts, updates of finish time, job and order, and deletes. The same attempts, so the
same figures (and tests/hud/stores/test_clickhouse_parity.py holds them equal to ClickHouse's, which sorts)."""

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from hud.stores.base import latest_order
from ootci.models import Backend, JobResult

pytestmark = pytest.mark.django_db
JOB = ", ".join(JobResult.JOB_FIELDS)


def newer_by_sort() -> dict[int, object]:
    with connection.cursor() as db:
        db.execute(
            f"""SELECT id, MAX(finished_at) OVER (PARTITION BY {JOB} ORDER BY {latest_order()}
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) FROM ootci_jobresult"""
        )
        return dict(db.fetchall())


def newer_kept() -> dict[int, object]:
    with connection.cursor() as db:
        db.execute("SELECT id, newer_finished_at FROM ootci_jobresult")
        return dict(db.fetchall())


def latest_by_sort(event: str, since) -> list[int]:
    with connection.cursor() as db:
        db.execute(
            f"""SELECT id FROM (SELECT DISTINCT ON ({JOB}) * FROM ootci_jobresult
                WHERE event_type = %s AND finished_at >= %s ORDER BY {JOB}, {latest_order()}) AS latest""",
            [event, since],
        )
        return sorted(r[0] for r in db.fetchall())


def latest_by_filter(event: str, since) -> list[int]:
    with connection.cursor() as db:
        db.execute(
            """SELECT id FROM ootci_jobresult WHERE event_type = %s
               AND finished_at >= %s AND (newer_finished_at IS NULL OR newer_finished_at < %s)""",
            [event, since, since],
        )
        return sorted(r[0] for r in db.fetchall())


def attempt(rng: random.Random, backends: list[Backend], now, n: int) -> JobResult:
    created = now - timedelta(hours=rng.uniform(0, 24 * 10))
    done = rng.random() < 0.8
    return JobResult(
        backend=rng.choice(backends),
        delivery_id=f"d{rng.randrange(4)}",
        event_type=rng.choice(["pull_request", "nightly"]),
        upstream_repo="pytorch/pytorch",
        head_sha=rng.choice(["", "a" * 40, "b" * 40]),
        workflow_name="ci",
        job_name=rng.choice(["build", "test"]),
        run_id=str(n),
        run_attempt=rng.choice([1, 1, 2, 3]),
        status="completed" if done else "in_progress",
        conclusion=rng.choice(["success", "failure", "cancelled"]) if done else "",
        started_at=created + timedelta(minutes=rng.uniform(0, 600)) if rng.random() < 0.9 else None,
        completed_at=created + timedelta(hours=rng.uniform(0, 72)) if done else None,
        created_at=created,
    )


def histories(seed: int) -> list[Backend]:
    """Random job histories of two backends, written by every path: single and bulk inserts, updates of finish time,
    job and order one at a time (as the state machine writes) and in bulk, deletes."""
    rng = random.Random(seed)
    now = timezone.now()
    backends = [Backend.objects.create(repo=f"org/b{i}", level="L2") for i in range(2)]
    JobResult.objects.bulk_create([attempt(rng, backends, now, n) for n in range(150)])
    for n in range(150, 200):
        attempt(rng, backends, now, n).save()
    ids = list(JobResult.objects.values_list("pk", flat=True))
    for pk in rng.sample(ids, 40):
        job = JobResult.objects.get(pk=pk)
        job.completed_at = now - timedelta(hours=rng.uniform(0, 24 * 10))
        job.status, job.conclusion = "completed", rng.choice(["success", "failure"])
        job.save()
    JobResult.objects.filter(pk__in=rng.sample(ids, 30)).update(head_sha="b" * 40)
    JobResult.objects.filter(pk__in=rng.sample(ids, 20)).update(created_at=now - timedelta(days=2))
    JobResult.objects.filter(pk__in=rng.sample(ids, 10)).update(backend=backends[0], event_type="nightly")
    JobResult.objects.filter(pk__in=rng.sample(ids, 15)).delete()
    return backends


@pytest.mark.parametrize("seed", range(4))
def test_the_kept_column_picks_the_latest_attempts_the_sort_picks(seed):
    histories(seed)
    now = timezone.now()

    assert newer_kept() == newer_by_sort()
    assert sum(v is not None for v in newer_kept().values()) > 20  # the histories do have superseded attempts
    for days in (1, 3, 7, 30):
        for event in ("pull_request", "nightly"):
            since = now - timedelta(days=days)
            assert latest_by_filter(event, since) == latest_by_sort(event, since)


@pytest.mark.django_db(transaction=True)
def test_two_transactions_adding_attempts_of_one_job_at_once_see_each_other():
    """The older attempt's transaction is still open when the newer one is added: the trigger's per-job lock makes
    the second wait for the first to commit, so the older attempt still learns of the newer one's finish."""
    import threading

    import psycopg

    backend = Backend.objects.create(repo="org/race", level="L2")
    s = connection.settings_dict
    dsn = f"host={s['HOST']} port={s['PORT'] or 5432} user={s['USER']} dbname={s['NAME']}"
    insert = """INSERT INTO ootci_jobresult (backend_id, delivery_id, event_type, upstream_repo, pr_number, head_sha,
        workflow_name, job_name, run_id, run_attempt, check_run_id, status, conclusion, completed_at, failed_tests,
        artifact_url, run_url, level, one_shot, relay_decided, source, failure_class, verdict, sha_check,
        auto_retry_note, environment, created_at, updated_at)
        VALUES (%s, 'd', 'nightly', 'pytorch/pytorch', NULL, 'abc', 'ci', 'test', '1', %s, '', 'completed', 'success',
        now(), '[]', '', '', 'L2', false, false, 'callback', '', '', '', '', '{}', now() + %s * interval '1 s',
        now())"""
    first = psycopg.connect(dsn)
    first.execute(insert, [backend.pk, 1, 0])  # open, not committed
    second = psycopg.connect(dsn, autocommit=True)
    thread = threading.Thread(target=lambda: second.execute(insert, [backend.pk, 2, 1]))
    thread.start()
    thread.join(0.5)
    assert thread.is_alive()  # waiting for the first transaction's lock on the job
    first.commit()
    thread.join(10)
    first.close()
    second.close()
    older = JobResult.objects.get(run_attempt=1, backend=backend)
    assert newer_kept()[older.pk] is not None
    assert newer_kept() == newer_by_sort()
