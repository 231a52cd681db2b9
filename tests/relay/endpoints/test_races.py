"""Regression tests for the races of a delivery's effect and of check-run syncs, and for a fan-out that meets the
task timeout: faults are real (a table lock held by another PostgreSQL session, a slow fake GitHub), nothing of ours
is replaced.
"""

import threading
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone
from django_q.models import Task

from ootci.models import Delivery, Dispatch, JobResult
from relay import tasks
from relay.endpoints import intake
from tests.fakes.oidc import HEAD
from tests.relay.conftest import fixture_json

UPSTREAM = "pytorch/pytorch"  # the repo of Downstream.dispatch()'s PR, #4242 at HEAD
CHECK_RUNS = f"/repos/{UPSTREAM}/check-runs"

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def table_locked(table: str):
    """Another session holds ``table`` exclusively, and this one gives up waiting for it after 0.3 s: a database
    fault (a lock timeout, as a deadlock or a long migration would cause) in whatever touches the table."""
    params = connection.get_connection_params()
    other = psycopg.connect(**{k: v for k, v in params.items() if k not in ("cursor_factory", "context")})
    other.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '300ms'")
    try:
        yield
    finally:
        other.rollback()
        other.close()
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")


def labeled(post_webhook, settings, **extra):
    settings.UPSTREAM_REPO = UPSTREAM
    payload = fixture_json("pull_request.labeled.payload")
    payload["repository"]["full_name"] = UPSTREAM
    payload["number"] = 4242
    payload["label"] = {"name": "ciflow/oot/npu"}
    pr = payload["pull_request"]
    pr.update(number=4242, labels=[{"name": "ciflow/oot/npu"}])
    pr["head"]["sha"] = HEAD
    pr["updated_at"] = (timezone.now() + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return post_webhook("pull_request", payload, **extra)


def test_a_label_is_applied_with_its_delivery_even_when_the_database_fails_after_it(
    fake_github, downstream, post_webhook, settings
):
    ci = downstream("L3", device="npu")
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    assert not fake_github.requests_to("POST", CHECK_RUNS)  # no label yet: no check run

    # Whatever a label means is committed with its delivery: a fault in a later step cannot leave the delivery
    # stored ("duplicate" to GitHub's redelivery) and the label's check runs never created.
    with table_locked("ootci_dispatch"):
        response = labeled(post_webhook, settings, delivery_id="label-1")
    assert response.status_code == 200

    [created] = fake_github.requests_to("POST", CHECK_RUNS)
    assert created.json["status"] == "in_progress"
    assert not Delivery.objects.get(delivery_id="label-1").pending


def test_a_label_whose_backfill_task_failed_is_finished_by_the_schedule(
    fake_github, downstream, post_webhook, settings
):
    ci = downstream("L3", device="npu")
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200

    with table_locked("ootci_jobresult"):  # the backfill task reads job results: it fails
        response = labeled(post_webhook, settings, delivery_id="label-2")
        assert response.status_code == 200  # the answer does not depend on the task
    assert not fake_github.requests_to("POST", CHECK_RUNS)
    assert Delivery.objects.get(delivery_id="label-2").pending

    assert intake.deliveries_finish_pending() == 0  # not stale yet: its task may still be running
    assert intake.deliveries_finish_pending(now=timezone.now() + timedelta(minutes=2)) == 1

    [created] = fake_github.requests_to("POST", CHECK_RUNS)
    assert created.json["status"] == "in_progress"
    assert not Delivery.objects.get(delivery_id="label-2").pending
    assert intake.deliveries_finish_pending(now=timezone.now() + timedelta(minutes=2)) == 0


def test_a_check_run_sync_holds_no_transaction_or_lock_while_github_answers(fake_github, downstream):
    ci = downstream("L4", device="npu")
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    job = JobResult.objects.get()
    fake_github.latency = 0.6  # GitHub is slow: every call takes this long
    done = threading.Event()

    def worker():
        try:
            tasks.check_run_sync(job.pk)
        finally:
            connection.close()
            done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    seen = set()
    with connection.cursor() as cursor:
        while not done.wait(0.05):
            cursor.execute(
                "SELECT state FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            seen.update(state for (state,) in cursor.fetchall())
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            seen.update(["advisory lock"] * cursor.fetchone()[0])
    thread.join()
    fake_github.latency = 0

    assert "idle in transaction" not in seen
    assert "advisory lock" not in seen
    assert len(fake_github.requests_to("PATCH", CHECK_RUNS + r"/\d+")) == 1
    assert JobResult.objects.get().check_run_claimed_at is None  # released


def test_a_fan_out_slower_than_the_task_timeout_sends_each_dispatch_once(
    fake_github, post_webhook, make_backend, settings
):
    for i in range(100):
        make_backend(f"org/backend-{i:03}")
    # A task may run 3 s and GitHub answers in 0.1 s at most 1 s late: each task stops starting requests after 1 s,
    # so 100 dispatches on 4 threads (2.5 s of GitHub's time) take several tasks, none killed mid-request.
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 3}
    settings.GITHUB_TIMEOUT_SECONDS = 1
    settings.DISPATCH_CONCURRENCY = 4
    fake_github.latency = 0.1

    response = post_webhook("pull_request", "pull_request.opened.payload", delivery_id="fan-out")
    assert response.status_code == 202

    sent = [r.path for r in fake_github.dispatches()]
    assert len(sent) == 100 and len(set(sent)) == 100  # every backend once: nothing lost, nothing twice
    assert set(Dispatch.objects.values_list("status", "attempts")) == {("sent", 1)}
    # Each task stopped at its deadline and handed the rest on (2.5 s of GitHub's time, 1 s a task).
    assert Task.objects.filter(func="relay.tasks.dispatches_send").count() >= 2
