"""The zombie sweeper: in-progress jobs past ZOMBIE_TIMEOUT_HOURS become timed_out; lost dispatches are counted."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from django.utils.module_loading import import_string
from django_q.models import Schedule

from ootci.models import Delivery, Dispatch, JobResult
from relay import tasks
from relay.reliability import sweeper
from tests.fakes.oidc import reporter_body
from tests.schedules import schedules_installed


@pytest.fixture
def make_job(make_backend):
    backend = make_backend(repo="ascend/pytorch-npu")

    def make(*, started_ago: timedelta, status: str = "in_progress", job_name: str = "test", **fields) -> JobResult:
        started = timezone.now() - started_ago
        return JobResult.objects.create(
            backend=fields.pop("backend", backend),
            delivery_id="d-1",
            event_type="pull_request",
            upstream_repo="pytorch/pytorch",
            workflow_name="npu-ci",
            job_name=job_name,
            run_id="1",
            status=status,
            started_at=started,
            created_at=started,
            **fields,
        )

    return make


def test_it_times_out_jobs_in_progress_for_too_long(make_job, settings):
    settings.ZOMBIE_TIMEOUT_HOURS = 6
    zombie = make_job(started_ago=timedelta(hours=7), job_name="zombie")
    running = make_job(started_ago=timedelta(hours=5), job_name="running")
    done = make_job(started_ago=timedelta(hours=9), job_name="done", status="completed", conclusion="success")

    result = sweeper.jobs_sweep()

    assert result.timed_out == [zombie.pk]
    zombie.refresh_from_db()
    assert (zombie.status, zombie.conclusion, zombie.relay_decided, zombie.source) == (
        "completed",
        "timed_out",
        True,
        "sweeper",
    )
    assert 7 * 3600 <= zombie.execution_time < 7 * 3600 + 60
    assert zombie.completed_at is not None
    running.refresh_from_db()
    done.refresh_from_db()
    assert running.status == "in_progress"
    assert (done.conclusion, done.relay_decided) == ("success", False)


def test_sweeping_twice_concludes_a_job_once(make_job):
    zombie = make_job(started_ago=timedelta(days=1))

    assert sweeper.jobs_sweep().timed_out == [zombie.pk]
    first = JobResult.objects.get().updated_at
    assert sweeper.jobs_sweep().timed_out == []
    assert JobResult.objects.get().updated_at == first


def test_it_sweeps_in_batches(make_job, monkeypatch):
    monkeypatch.setattr(sweeper, "SWEEP_BATCH", 2)
    zombies = [make_job(started_ago=timedelta(days=1), job_name=f"j{i}") for i in range(5)]

    assert sorted(sweeper.jobs_sweep().timed_out) == sorted(z.pk for z in zombies)


def test_it_counts_dispatches_never_called_back_as_lost(make_backend, make_job, settings):
    settings.ZOMBIE_TIMEOUT_HOURS = 6
    shown, hidden = make_backend(repo="a/shown", level="L2"), make_backend(repo="b/hidden", level="L1")
    long_ago = timezone.now() - timedelta(hours=8)
    upstream = {"event": "pull_request", "upstream_repo": "pytorch/pytorch", "payload": {}}
    delivery = Delivery.objects.create(delivery_id="d-1", **upstream)
    fresh = Delivery.objects.create(delivery_id="d-2", **upstream)
    lost = Dispatch.objects.create(delivery=delivery, backend=shown, status="sent", created_at=long_ago)
    Dispatch.objects.create(delivery=delivery, backend=hidden, status="sent", created_at=long_ago)
    answered = make_backend(repo="c/answered", level="L2")
    called_back = Dispatch.objects.create(delivery=delivery, backend=answered, status="sent", created_at=long_ago)
    make_job(started_ago=timedelta(hours=7), backend=answered, dispatch=called_back, status="completed")
    Dispatch.objects.create(delivery=fresh, backend=shown, status="sent")  # still within its time

    assert sweeper.jobs_sweep().lost == 1
    assert lost.jobs.count() == 0


def test_a_genuine_completion_after_the_sweep_replaces_the_timeout(downstream, settings):
    settings.ZOMBIE_TIMEOUT_HOURS = 1
    ci = downstream()
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    JobResult.objects.update(started_at=timezone.now() - timedelta(hours=2))
    assert len(sweeper.jobs_sweep().timed_out) == 1

    response = ci.post(ci.body("pull_request.completed.failure", dispatch))

    assert response.status_code == 200, response.text
    job = JobResult.objects.get()
    assert (job.conclusion, job.relay_decided, job.source) == ("failure", False, "callback")
    assert job.execution_time >= 7200


def test_it_leaves_completed_self_reports_alone(downstream):
    ci = downstream()
    assert ci.post(reporter_body("nightly.completed")).json()["duplicate"] is False

    assert sweeper.jobs_sweep().timed_out == []
    assert ci.post(reporter_body("nightly.completed")).json()["duplicate"] is True


def test_the_task_reports_its_counts(make_job):
    make_job(started_ago=timedelta(days=2))

    assert tasks.jobs_sweep() == {"timed_out": 1, "lost": 0, "follow_ups_waiting": 0}


# Schedules are installed by migrations; a transactional test that ran before in this worker flushed them (and
# serialized_rollback does nothing for a test that is not transactional): run the migrations' operations again.
@pytest.mark.django_db
def test_the_sweeper_is_scheduled():
    schedules_installed()
    schedule = Schedule.objects.get(func="relay.tasks.jobs_sweep")

    assert (schedule.schedule_type, schedule.minutes, schedule.repeats) == (Schedule.MINUTES, 10, -1)


@pytest.mark.django_db
def test_every_scheduled_task_names_a_function_that_exists():
    schedules_installed()
    funcs = list(Schedule.objects.values_list("func", flat=True))

    assert funcs
    for func in funcs:
        assert callable(import_string(func)), func


@pytest.mark.django_db(transaction=True)
def test_the_sweeper_racing_a_late_completion_leaves_the_callbacks_result(downstream, settings):
    # Both at once, five times: whichever the database serves first, the genuine completion is what remains.
    settings.ZOMBIE_TIMEOUT_HOURS = 1
    ci = downstream()
    for _ in range(5):
        dispatch = ci.dispatch()
        assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
        JobResult.objects.filter(delivery_id=dispatch.delivery.delivery_id).update(
            started_at=timezone.now() - timedelta(hours=2)
        )
        go, answers = threading.Barrier(2), {}
        completion = ci.body("pull_request.completed.failure", dispatch)

        def sweep(go=go):
            go.wait()
            try:
                sweeper.jobs_sweep()
            finally:
                connection.close()

        def complete(go=go, answers=answers, body=completion):
            go.wait()
            answers["callback"] = ci.post(body).status_code

        threads = [threading.Thread(target=sweep), threading.Thread(target=complete)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        assert answers["callback"] == 200
        job = JobResult.objects.get(delivery_id=dispatch.delivery.delivery_id)
        assert (job.status, job.conclusion, job.relay_decided) == ("completed", "failure", False)
