"""The successes' follow-ups in bulk (relay.reports.follow_up_queue): one task for a burst, each job followed up as its
own task would have been, nothing lost to a worker killed in a chunk, a lock left behind or a task lost unstarted."""

import os
import subprocess
import sys
import threading
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ootci.broker import RedisBroker
from relay import tasks
from relay.reports import follow_up_queue
from tests.relay.reports.test_pull import listings, shard_completed, shards_started, store  # noqa: F401 - fixture

SHARDS = ["shard-1", "shard-2", "shard-3"]


def waiting() -> int:
    return RedisBroker.get_connection().llen(follow_up_queue.keys()[0])


def test_a_burst_of_successes_queues_one_task_that_follows_each_up(downstream, store, fake_github, queued_tasks):  # noqa: F811
    ci = downstream()
    dispatch = shards_started(ci, fake_github, SHARDS)
    for name in SHARDS:
        shard_completed(ci, dispatch, name)

    assert queued_tasks() == [("relay.tasks.job_follow_ups", ())]  # one for the three
    assert (waiting(), listings(fake_github)) == (3, 0)
    with CaptureQueriesContext(connection) as statements:
        assert tasks.job_follow_ups() == {"followed_up": 3}
    reads = [q["sql"] for q in statements.captured_queries if "ootci_incident" in q["sql"] or "job.id IN" in q["sql"]]
    assert len(reads) == 2  # the three jobs read together, and whether their PR's incident fires
    assert (waiting(), listings(fake_github)) == (0, 1)  # the run listed once, for its three successes
    assert [name for name, _ in queued_tasks()] == ["relay.tasks.job_reports_pull"] * 3


def test_the_task_lingers_for_the_burst_and_the_jobs_completing_meanwhile_queue_no_other(
    downstream,
    store,  # noqa: F811
    fake_github,
    queued_tasks,
    settings,
):
    settings.FOLLOW_UPS_LINGER_SECONDS = 0.5
    ci = downstream()
    dispatch = shards_started(ci, fake_github, SHARDS)
    for name in SHARDS:
        shard_completed(ci, dispatch, name)
    assert queued_tasks() == [("relay.tasks.job_follow_ups", ())]
    client = RedisBroker.get_connection()
    ids, pending, _ = follow_up_queue.keys()
    later = [int(raw) for raw in client.lrange(ids, 1, -1)]
    client.ltrim(ids, 0, 0)  # the burst's last two jobs complete while the task runs, 0.2 s apart

    def complete_later():
        for job_id in later:
            time.sleep(0.2)
            follow_up_queue.follow_up_queue(job_id, conclusion="success")

    completing = threading.Thread(target=complete_later)
    completing.start()
    started = time.monotonic()
    assert tasks.job_follow_ups() == {"followed_up": 3}  # the first, then each as it came
    completing.join()

    assert 0.4 + 0.5 <= time.monotonic() - started < 0.4 + 0.5 + 2  # it waited half a second after the last
    assert [name for name, _ in queued_tasks()] == ["relay.tasks.job_reports_pull"] * 3  # no second bulk task
    assert listings(fake_github) == 1
    assert not client.exists(pending) and waiting() == 0  # the mark gone with it: the next job queues a task


def test_a_failure_is_still_followed_up_by_a_task_of_its_own(downstream, store, fake_github, queued_tasks):  # noqa: F811
    ci = downstream()
    dispatch = shards_started(ci, fake_github, SHARDS[:1])
    shard_completed(ci, dispatch, "shard-1", "failure")

    assert [name for name, _ in queued_tasks()] == ["relay.tasks.job_completed"]
    assert waiting() == 0


def test_without_redis_a_success_is_followed_up_by_a_task_of_its_own(downstream, queued_tasks, settings):
    settings.REDIS_URL = ""  # the embedded default: the ORM broker, no list to hold
    ci = downstream()
    dispatch = ci.dispatch()
    ci.post(ci.body("pull_request.in_progress", dispatch))
    ci.post(ci.body("pull_request.completed.failure", dispatch, conclusion="success"))

    assert [name for name, _ in queued_tasks()] == ["relay.tasks.job_completed"]


def test_a_lock_left_by_a_killed_task_holds_the_list_until_it_expires(downstream, store, fake_github, queued_tasks):  # noqa: F811
    ci = downstream()
    dispatch = shards_started(ci, fake_github, SHARDS)
    for name in SHARDS:
        shard_completed(ci, dispatch, name)
    RedisBroker.get_connection().set(follow_up_queue.keys()[2], "a killed task's", px=300)

    assert tasks.job_follow_ups() == {"followed_up": 0, "left_to_the_lock_holder": 1}
    assert waiting() == 3
    time.sleep(0.4)
    assert tasks.job_follow_ups() == {"followed_up": 3}
    assert listings(fake_github) == 1


def test_the_sweeper_queues_the_task_for_a_list_no_task_will_take(downstream, queued_tasks):
    ci = downstream()
    dispatch = ci.dispatch()
    for name in SHARDS:
        ci.post(ci.body("pull_request.in_progress", dispatch, job_name=name))
        ci.post(ci.body("pull_request.completed.failure", dispatch, job_name=name, conclusion="success"))
    assert queued_tasks() == [("relay.tasks.job_follow_ups", ())]  # taken off the queue here: lost unstarted

    assert tasks.jobs_sweep()["follow_ups_waiting"] == 3
    assert queued_tasks() == []  # its mark says a task is queued, for PENDING_SECONDS
    RedisBroker.get_connection().delete(follow_up_queue.keys()[1])  # the mark's time ran out
    assert tasks.jobs_sweep()["follow_ups_waiting"] == 3
    assert queued_tasks() == [("relay.tasks.job_follow_ups", ())]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a second process on the test database (PostgreSQL lane)")
def test_a_task_killed_within_a_chunk_leaves_the_chunk_to_the_next(
    downstream,
    store,  # noqa: F811
    fake_github,
    queued_tasks,
    app_key,
    tmp_path,
    settings,
):
    ci = downstream()
    dispatch = shards_started(ci, fake_github, SHARDS)
    for name in SHARDS:
        shard_completed(ci, dispatch, name)
    queued_tasks()
    key = tmp_path / "app.pem"
    key.write_text(app_key.private_pem)
    db = connection.settings_dict
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "GITHUB_API_URL": fake_github.url,
        "GITHUB_APP_ID": str(fake_github.app_id),
        "GITHUB_APP_PRIVATE_KEY": str(key),
        "TEST_REPORTS_URL": store.as_uri(),
    }
    opened = fake_github.connections_opened
    fake_github.latency = 5  # the task's first call to GitHub hangs: the worker is killed there
    worker = subprocess.Popen(
        [sys.executable, "-c", "import django; django.setup(); from relay import tasks; tasks.job_follow_ups()"],
        env=env,
        cwd=settings.BASE_DIR,
    )
    deadline = time.monotonic() + 30
    while fake_github.connections_opened == opened and time.monotonic() < deadline:
        time.sleep(0.02)
    worker.kill()
    worker.wait()
    fake_github.latency = 0.0

    assert fake_github.connections_opened > opened and waiting() == 3  # the chunk it was in stays on the list
    RedisBroker.get_connection().delete(follow_up_queue.keys()[2])  # its lock's time ran out
    assert tasks.job_follow_ups() == {"followed_up": 3}
    assert waiting() == 0 and [name for name, _ in queued_tasks()] == ["relay.tasks.job_reports_pull"] * 3


def test_a_task_past_half_its_timeout_lets_go_and_queues_its_continuation(downstream, queued_tasks, monkeypatch):
    from django_q.conf import Conf

    ci = downstream()
    dispatch = ci.dispatch()
    for name in SHARDS:
        ci.post(ci.body("pull_request.in_progress", dispatch, job_name=name))
        ci.post(ci.body("pull_request.completed.failure", dispatch, job_name=name, conclusion="success"))
    queued_tasks()
    monkeypatch.setattr(Conf, "TIMEOUT", 0.001)  # half of it is over after the first follow-up

    assert tasks.job_follow_ups() == {"followed_up": 1, "continued": 1}
    assert waiting() == 2
    assert ("relay.tasks.job_follow_ups", ()) in queued_tasks()
    assert not RedisBroker.get_connection().exists(follow_up_queue.keys()[2])  # free for the continuation to take
    monkeypatch.setattr(Conf, "TIMEOUT", 120)
    assert tasks.job_follow_ups() == {"followed_up": 2}
