"""Webhooks and callbacks while Redis (broker, cache, rate limits) is stopped or hangs, real parts only: a
redis-server of the test's own, tasks queued to it as in production (not run inline), the fake GitHub and OIDC
issuer over HTTP. Every answer is quick and no 5xx; every stored webhook is dispatched exactly once after Redis is
back, by the queued tasks that reached it and the stale-dispatch schedule.
"""

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
import redis
from django.db import connection
from django.utils import timezone
from django.utils.module_loading import import_string
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import Schedule
from django_q.signing import SignedPackage
from django_q.tasks import async_task

from ootci import tasks as ootci_tasks
from ootci.models import DeferredTask, Dispatch, JobResult
from relay import tasks
from tests.schedules import schedules_installed
from tests.servers import RedisServer

pytestmark = pytest.mark.django_db(transaction=True)

WEBHOOKS = 8
# GitHub gives up on a webhook after 10 s; the bar for an answer while Redis fails.
ANSWER_BOUND = 2.0


@pytest.fixture
def own_redis(settings, monkeypatch, tmp_path):
    """A Redis of this test's own as REDIS_URL: cache, rate limits and the task broker (tasks queued, not run)."""
    server = RedisServer(tmp_path).start()
    settings.REDIS_URL = server.url
    settings.CACHES = {**settings.CACHES, "default": {**settings.CACHES["default"], "LOCATION": server.url}}
    monkeypatch.setattr(Conf, "REDIS", server.url)
    monkeypatch.setattr(Conf, "SYNC", False)
    yield server
    server.stop()


def timed(call):
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def webhooks_arrive(post_webhook) -> list[tuple[int, float]]:
    answers = []
    for n in range(WEBHOOKS):
        response, took = timed(
            lambda n=n: post_webhook("pull_request", "pull_request.opened.payload", delivery_id=f"w-{n}")
        )
        answers.append((response.status_code, took))
    return answers


def worker_drains_the_queue() -> int:
    """What a qcluster does with the tasks that reached Redis: run each once."""
    broker, ran = get_broker(), 0
    while task := broker.dequeue():
        package = SignedPackage.loads(task[0][1])
        import_string(package["func"])(*package["args"], **package["kwargs"])
        ran += 1
    return ran


def the_schedule_runs_after_the_stale_time() -> None:
    """The ``relay: resend stale dispatches`` schedule, once DISPATCH_STALE_SECONDS have gone by."""
    Dispatch.objects.update(updated_at=timezone.now() - timedelta(minutes=5))
    tasks.dispatches_resend_stale()


def sent_once_each(fake_github) -> bool:
    sent = Counter((r.path, r.json["client_payload"]["delivery_id"]) for r in fake_github.dispatches())
    return len(sent) == 2 * WEBHOOKS and set(sent.values()) == {1}


@pytest.fixture
def backends(make_backend, fake_github):
    make_backend("org/a")
    make_backend("org/b")
    return fake_github


def test_webhooks_are_stored_and_answered_quickly_while_redis_is_stopped(own_redis, post_webhook, backends):
    own_redis.stop()

    answers = webhooks_arrive(post_webhook)

    assert {status for status, _ in answers} == {202}
    assert max(took for _, took in answers) < ANSWER_BOUND
    assert Dispatch.objects.filter(status="pending").count() == 2 * WEBHOOKS
    own_redis.start()  # back, empty: every queued task was lost with it
    assert worker_drains_the_queue() == 0
    the_schedule_runs_after_the_stale_time()
    assert set(Dispatch.objects.values_list("status", flat=True)) == {"sent"}
    assert sent_once_each(backends)
    the_schedule_runs_after_the_stale_time()
    assert sent_once_each(backends)


def test_webhooks_are_answered_quickly_while_redis_hangs_and_each_is_sent_once(own_redis, post_webhook, backends):
    own_redis.pause()

    answers = webhooks_arrive(post_webhook)

    assert {status for status, _ in answers} == {202}
    assert max(took for _, took in answers) < ANSWER_BOUND
    own_redis.resume()  # the tasks whose enqueue timed out may still have reached it
    worker_drains_the_queue()
    the_schedule_runs_after_the_stale_time()
    worker_drains_the_queue()
    assert set(Dispatch.objects.values_list("status", flat=True)) == {"sent"}
    assert sent_once_each(backends)


@pytest.mark.parametrize("fault", ["stop", "pause"])
def test_callbacks_are_applied_and_answered_quickly_while_redis_fails(own_redis, downstream, fault):
    ci = downstream(level="L4", device="npu")  # L4: every report also queues a check-run sync
    dispatch = ci.dispatch()
    getattr(own_redis, fault)()

    answers = [
        timed(lambda name=name: ci.post(ci.body(name, dispatch)))
        for name in ("pull_request.in_progress", "pull_request.completed.failure")
    ]

    assert [response.status_code for response, _ in answers] == [200, 200], answers[0][0].text
    assert max(took for _, took in answers) < ANSWER_BOUND
    job = JobResult.objects.get()
    assert (job.status, job.conclusion) == ("completed", "failure")


def queued() -> list[tuple[str, tuple]]:
    """The tasks in Redis, taken off it: (function, arguments) each."""
    broker, found = get_broker(), []
    while task := broker.dequeue():
        package = SignedPackage.loads(task[0][1])
        found.append((package["func"], package["args"]))
    return found


def test_a_callback_whose_follow_up_redis_did_not_take_has_it_queued_once_redis_is_back(own_redis, downstream):
    ci = downstream(level="L2")
    dispatch = ci.dispatch()
    own_redis.stop()

    for name in ("pull_request.in_progress", "pull_request.completed.failure"):
        assert ci.post(ci.body(name, dispatch)).status_code == 200
    job = JobResult.objects.get()

    assert list(DeferredTask.objects.values_list("func", flat=True)) == ["relay.tasks.job_completed"]
    with pytest.raises(redis.RedisError):  # still down: nothing is lost
        ootci_tasks.deferred_tasks_requeue()
    assert DeferredTask.objects.count() == 1

    own_redis.start()
    assert ootci_tasks.deferred_tasks_requeue() == 1
    assert queued() == [("relay.tasks.job_completed", (job.pk,))]
    assert not DeferredTask.objects.exists()
    assert ootci_tasks.deferred_tasks_requeue() == 0


def test_a_success_redis_did_not_take_on_the_bulk_list_is_followed_up_alone_once_redis_is_back(own_redis, downstream):
    ci = downstream(level="L2")
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    own_redis.stop()

    completed = ci.body("pull_request.completed.failure", dispatch, conclusion="success")
    assert ci.post(completed).status_code == 200
    job = JobResult.objects.get()

    assert list(DeferredTask.objects.values_list("func", flat=True)) == ["relay.tasks.job_completed"]
    own_redis.start()
    assert ootci_tasks.deferred_tasks_requeue() == 1
    assert queued() == [("relay.tasks.job_completed", (job.pk,))]


def test_the_same_call_deferred_again_is_kept_once(own_redis, admin_client):
    own_redis.stop()
    for _ in range(3):  # a schedule coming due every minute of the outage
        async_task("ootci.tasks.readiness_review")
    async_task("relay.tasks.check_run_sync", 7)
    async_task("relay.tasks.check_run_sync", 8)
    assert DeferredTask.objects.count() == 3
    listed = admin_client.get("/admin/ootci/deferredtask/").content.decode()
    assert listed.count("relay.tasks.check_run_sync") >= 2 and "3 deferred tasks" in listed

    own_redis.start()
    assert ootci_tasks.deferred_tasks_requeue() == 3
    assert sorted(queued()) == [
        ("ootci.tasks.readiness_review", ()),
        ("relay.tasks.check_run_sync", (7,)),
        ("relay.tasks.check_run_sync", (8,)),
    ]


def test_deferred_tasks_are_queued_every_minute(db):
    schedules_installed()
    found = Schedule.objects.get(func="ootci.tasks.deferred_tasks_requeue")
    assert (found.schedule_type, found.minutes) == (Schedule.MINUTES, 1)


def test_two_requeues_at_once_push_each_deferred_task_once(own_redis):
    own_redis.stop()
    for n in range(300):
        async_task("relay.tasks.check_run_sync", n)
    assert DeferredTask.objects.count() == 300
    own_redis.start()
    counts, go = [], threading.Barrier(2)

    def requeue():
        go.wait()
        try:
            counts.append(ootci_tasks.deferred_tasks_requeue())
        finally:
            connection.close()

    threads = [threading.Thread(target=requeue) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    pushed = queued()
    assert sum(counts) == 300 and len(pushed) == 300 and len(set(pushed)) == 300  # each once, none lost
    assert not DeferredTask.objects.exists()
