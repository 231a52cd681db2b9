"""POST /github/callback over real HTTP: the state machine, metrics, provenance and idempotency.

The server is pytest-django's live server on PostgreSQL and Redis; tokens come from the fake OIDC
issuer, whose JWKS endpoint the relay fetches over HTTP.
"""

import json
import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from ootci.models import CallbackRejection, JobFailure, JobResult
from relay.endpoints.tokens import callback_token_issue, callback_token_problem
from tests.fakes.oidc import HEAD, NIGHTLY_SHA, reporter_body


def test_it_records_an_in_progress_report_with_its_queue_time(downstream):
    ci = downstream()
    dispatch = ci.dispatch(sent_ago=30)
    body = ci.body("pull_request.in_progress", dispatch)
    # The echoed upstream payload is untrusted: a forged PR number and SHA must not reach the row.
    body["payload"]["pull_request"].update(number=1, head={"sha": "f" * 40})

    response = ci.post(body)

    assert response.status_code == 200, response.text
    assert response.json() == {"ok": True, "status": "in_progress", "duplicate": False}
    job = JobResult.objects.get()
    assert (job.backend, job.dispatch, job.delivery_id) == (ci.backend, dispatch, dispatch.delivery.delivery_id)
    assert (job.event_type, job.upstream_repo, job.pr_number, job.head_sha) == (
        "pull_request",
        "pytorch/pytorch",
        4242,
        HEAD,
    )
    assert (job.workflow_name, job.job_name, job.run_id, job.run_attempt) == (
        "npu-ci",
        "test-npu-float32",
        "24033272679",
        1,
    )
    assert (job.status, job.conclusion, job.check_run_id, job.level) == ("in_progress", "", "98765432100", "L2")
    assert job.run_url == "https://github.com/ascend/pytorch-npu/actions/runs/24033272679"
    assert 29 <= job.queue_time <= 40
    assert job.execution_time is None and job.started_at is not None and not job.one_shot


def test_it_completes_a_job_with_its_execution_time_and_test_results(downstream):
    ci = downstream()
    dispatch = ci.dispatch(sent_ago=60)
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    JobResult.objects.update(started_at=timezone.now() - timedelta(seconds=120))

    response = ci.post(ci.body("pull_request.completed.failure", dispatch))

    assert response.status_code == 200, response.text
    assert response.json() == {"ok": True, "status": "completed", "duplicate": False}
    job = JobResult.objects.get()
    assert (job.status, job.conclusion) == ("completed", "failure")
    assert 119 <= job.execution_time <= 130
    assert 59 <= job.queue_time <= 70  # kept from the in_progress report
    assert (job.passed, job.failed, job.skipped) == (8430, 2, 20)
    assert job.artifact_url == "https://ascend.github.io/ci-results/24033272679/"
    assert job.completed_at is not None and not job.one_shot and not job.relay_decided


def test_a_completed_report_without_in_progress_is_accepted_as_one_shot(downstream):
    ci = downstream()
    dispatch = ci.dispatch()

    response = ci.post(ci.body("pull_request.completed.failure", dispatch))

    assert response.status_code == 200, response.text
    job = JobResult.objects.get()
    assert (job.status, job.conclusion, job.one_shot) == ("completed", "failure", True)
    assert job.queue_time is None and job.execution_time is None


def test_an_exact_repeat_is_answered_200_without_a_second_effect(downstream):
    ci = downstream()
    dispatch = ci.dispatch()
    in_progress = ci.body("pull_request.in_progress", dispatch)
    completed = ci.body("pull_request.completed.failure", dispatch)
    assert ci.post(in_progress).status_code == 200
    first = JobResult.objects.get().updated_at

    again = ci.post(in_progress)

    assert again.status_code == 200 and again.json() == {"ok": True, "status": "in_progress", "duplicate": True}
    assert JobResult.objects.get().updated_at == first
    assert ci.post(completed).json()["duplicate"] is False
    done = JobResult.objects.get().updated_at
    assert ci.post(completed).json() == {"ok": True, "status": "completed", "duplicate": True}
    assert JobResult.objects.get().updated_at == done
    assert JobResult.objects.count() == 1 and not CallbackRejection.objects.exists()


def test_it_refuses_to_go_back_from_completed_to_in_progress(downstream):
    ci = downstream()
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.completed.failure", dispatch)).status_code == 200

    response = ci.post(ci.body("pull_request.in_progress", dispatch))

    assert response.status_code == 409
    assert "already completed (failure)" in response.json()["detail"]
    assert JobResult.objects.get().status == "completed"
    assert CallbackRejection.objects.get().status_code == 409


def test_it_refuses_a_second_completion_that_says_something_else(downstream):
    ci = downstream()
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.completed.failure", dispatch)).status_code == 200

    response = ci.post(ci.body("pull_request.completed.failure", dispatch, conclusion="success"))

    assert response.status_code == 409
    assert "conclusion 'failure' ≠ 'success'" in response.json()["detail"]
    assert JobResult.objects.get().conclusion == "failure"


def test_an_in_progress_repeat_with_other_details_is_a_conflict(downstream):
    ci = downstream()
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200

    response = ci.post(ci.body("pull_request.in_progress", dispatch, check_run_id="111"))

    assert response.status_code == 409
    assert "already in progress with other details" in response.json()["detail"]


@pytest.mark.parametrize("name", ["pull_request.in_progress", "pull_request.completed.failure"])
def test_concurrent_identical_callbacks_have_one_effect(downstream, name):
    ci = downstream()
    dispatch = ci.dispatch()
    if name.endswith("failure"):
        assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    body = json.dumps(ci.body(name, dispatch))
    token = ci.issuer.token(repository=ci.repo)
    start = threading.Barrier(8)
    answers = []

    def send():
        start.wait()
        answers.append(ci.post(body, token=token))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers]
    assert sorted(a.json()["duplicate"] for a in answers) == [False] + [True] * 7
    assert JobResult.objects.count() == 1


def test_a_rerun_attempt_is_a_new_job_attempt_without_queue_time(downstream):
    ci = downstream()
    dispatch = ci.dispatch(sent_ago=3600)
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200

    response = ci.post(ci.body("pull_request.in_progress", dispatch, run_attempt="2", check_run_id="98765432199"))

    assert response.status_code == 200, response.text
    first, rerun = JobResult.objects.order_by("run_attempt")
    assert (first.run_attempt, rerun.run_attempt) == (1, 2)
    assert first.queue_time >= 3600
    assert rerun.queue_time is None


def test_a_run_id_need_not_be_numeric(downstream):
    ci = downstream()
    dispatch = ci.dispatch()
    run_id = "018f2c4e-7b1a-4c8e-9d2f-5a6b7c8d9e0f"  # a Buildkite build id

    response = ci.post(ci.body("pull_request.completed.failure", dispatch, run_id=run_id, run_attempt=1))

    assert response.status_code == 200, response.text
    assert JobResult.objects.get().run_id == run_id


def test_it_keeps_only_http_links(downstream):
    ci = downstream()
    dispatch = ci.dispatch()
    body = ci.body(
        "pull_request.completed.failure", dispatch, url="javascript:alert(1)", artifact_url="ftp://example.com/x"
    )

    assert ci.post(body).status_code == 200

    job = JobResult.objects.get()
    assert (job.run_url, job.artifact_url) == ("", "")


def test_it_caps_the_failed_test_list(downstream):
    ci = downstream()
    dispatch = ci.dispatch()
    failed = [{"name": f"test_ops.py::test_add_{i}", "message": "x" * 1200} for i in range(1100)]
    body = ci.body("pull_request.completed.failure", dispatch)
    body["workflow"]["test_results"]["failed_tests"] = ["test_nn.py::test_conv", *failed]

    assert ci.post(body).status_code == 200

    stored = JobResult.objects.get().failed_tests
    assert len(stored) == 1000
    assert stored[0] == "test_nn.py::test_conv"
    assert stored[1].startswith("test_ops.py::test_add_0: xxx") and len(stored[1]) == 1000
    assert stored[1].endswith("…")


def test_it_refuses_a_callback_for_a_delivery_never_dispatched_to_the_caller(downstream):
    ci, other = downstream(), downstream()
    theirs = other.dispatch()

    fabricated = ci.post(reporter_body("pull_request.in_progress", delivery_id=str(uuid.uuid4())))
    not_ours = ci.post(reporter_body("pull_request.in_progress", delivery_id=theirs.delivery.delivery_id))

    for response in (fabricated, not_ours):
        assert response.status_code == 403
        assert f"was sent to {ci.repo}" in response.json()["detail"]
    assert not JobResult.objects.exists()
    assert list(CallbackRejection.objects.values_list("repo", "status_code")) == [(ci.repo, 403)] * 2


def test_it_refuses_a_callback_token_issued_to_another_repo(downstream):
    ci, other = downstream(), downstream()
    delivery_id = str(uuid.uuid4())
    ci.dispatch(delivery_id=delivery_id)
    theirs = other.dispatch(delivery_id=delivery_id)  # every backend gets the same delivery
    stolen = callback_token_issue(delivery_id=delivery_id, repo=other.repo)

    misused = ci.post(reporter_body("pull_request.in_progress", delivery_id=delivery_id, callback_token=stolen))
    forged = ci.post(reporter_body("pull_request.in_progress", delivery_id=delivery_id, callback_token="forged"))
    own = other.post(other.body("pull_request.in_progress", theirs))

    for response in (misused, forged):
        assert response.status_code == 403
        assert "callback_token was not issued" in response.json()["detail"]
    assert own.status_code == 200
    assert list(JobResult.objects.values_list("backend__repo", flat=True)) == [other.repo]


def test_a_callback_token_past_its_maximum_age_is_refused(downstream, settings):
    ci = downstream()
    dispatch = ci.dispatch()
    token = callback_token_issue(delivery_id=dispatch.delivery.delivery_id, repo=ci.repo)
    settings.CALLBACK_TOKEN_MAX_AGE_DAYS = 30
    fresh = ci.post(
        reporter_body("pull_request.in_progress", delivery_id=dispatch.delivery.delivery_id, callback_token=token)
    )
    assert fresh.status_code == 200, fresh.text

    settings.CALLBACK_TOKEN_MAX_AGE_DAYS = -1  # as if issued 31 days ago: a standing key no more
    stale = ci.post(
        reporter_body("pull_request.completed.failure", delivery_id=dispatch.delivery.delivery_id, callback_token=token)
    )

    assert stale.status_code == 403 and "expired" in stale.json()["detail"]
    assert JobResult.objects.get().status == "in_progress"


def test_a_callback_token_verified_before_is_not_checked_again_and_still_expires(settings, monkeypatch):
    from relay.endpoints import tokens

    settings.CALLBACK_TOKEN_MAX_AGE_DAYS = 1
    token = callback_token_issue(delivery_id="d-1", repo="Org/Repo")
    assert callback_token_problem(token, delivery_id="d-1", repo="org/repo") == ""
    monkeypatch.setattr(tokens.signing, "loads", None)  # kept: the run's next shard is not signature-checked again
    assert callback_token_problem(token, delivery_id="d-1", repo="org/repo") == ""
    assert "not issued for delivery 'd-2'" in callback_token_problem(token, delivery_id="d-2", repo="org/repo")

    later = time.time() + 86400 + 1
    monkeypatch.setattr(time, "time", lambda: later)
    assert "expired" in callback_token_problem(token, delivery_id="d-1", repo="org/repo")


def test_a_callback_without_a_token_is_accepted_on_its_dispatch_alone(downstream):
    ci = downstream()
    dispatch = ci.dispatch()

    response = ci.post(ci.body("pull_request.in_progress", dispatch, token=False))

    assert response.status_code == 200, response.text


@pytest.mark.parametrize("level", ["L3", "L4"])
def test_higher_levels_report_too(downstream, level):
    ci = downstream(level=level)
    dispatch = ci.dispatch()

    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    assert JobResult.objects.get().level == level


def test_a_push_report_has_no_pr(downstream):
    ci = downstream()
    dispatch = ci.dispatch(event="push")

    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200

    job = JobResult.objects.get()
    assert (job.event_type, job.pr_number, job.head_sha) == ("push", None, HEAD)


# --- nightly / periodic ---------------------------------------------------------------------------


def test_a_nightly_self_report_needs_no_dispatch(downstream):
    ci = downstream()

    response = ci.post(reporter_body("nightly.completed"))

    assert response.status_code == 200, response.text
    assert response.json() == {"ok": True, "status": "completed", "duplicate": False}
    job = JobResult.objects.get()
    assert (job.event_type, job.dispatch, job.delivery_id, job.head_sha) == ("nightly", None, NIGHTLY_SHA, NIGHTLY_SHA)
    assert (job.status, job.conclusion, job.passed, job.skipped) == ("completed", "success", 9120, 31)
    assert job.pr_number is None and not job.one_shot
    assert ci.post(reporter_body("nightly.completed")).json()["duplicate"] is True


def test_a_periodic_self_report_is_stored_as_periodic(downstream):
    ci = downstream()
    body = reporter_body("nightly.completed")
    body["event_type"] = "periodic"

    assert ci.post(body).status_code == 200
    assert JobResult.objects.get().event_type == "periodic"


def test_a_nightly_self_report_must_be_completed(downstream):
    ci = downstream()

    response = ci.post(reporter_body("nightly.completed", status="in_progress", conclusion=None))

    assert response.status_code == 400
    assert "must have status 'completed'" in response.json()["detail"]
    assert not JobResult.objects.exists()


def test_a_nightly_self_report_names_a_commit(downstream):
    ci = downstream()

    response = ci.post(reporter_body("nightly.completed", delivery_id="not-a-sha"))

    assert response.status_code == 400
    assert "tested upstream commit SHA" in response.json()["detail"]


def test_a_completing_callback_queues_one_task_and_the_worker_classifies_in_it(downstream, queued_tasks):
    from relay import tasks

    ci = downstream()
    dispatch = ci.dispatch()
    run = {"run_id": "24033272679", "url": f"https://github.com/{ci.repo}/actions/runs/24033272679"}
    assert ci.post(ci.body("pull_request.in_progress", dispatch, **run)).status_code == 200
    assert queued_tasks() == []  # an in_progress report starts nothing
    assert ci.post(ci.body("pull_request.completed.failure", dispatch, **run)).status_code == 200
    job = JobResult.objects.get()
    assert queued_tasks() == [("relay.tasks.job_completed", (job.pk,))]  # the request's only task

    assert not JobFailure.objects.exists()  # the answer did not wait for the log

    assert tasks.job_completed(job.pk) == "nothing"  # the worker: alert rules evaluated (none trips), and queued:
    assert queued_tasks() == [("relay.tasks.run_reports_pull", (job.pk, 1))]  # no GitHub App to list the run: again
    assert JobFailure.objects.get(job=job).problem  # the log classified in the same task (here: no GitHub App)


# --- queue time per workflow run (issue 26) --------------------------------------------------------


def test_queue_time_is_the_workflow_runs_and_a_test_job_after_a_build_waits_for_dependencies(downstream, client):
    """A build job, then a test job that starts after the 40-minute build: the run queued 5 minutes; the test job
    shows 40 minutes waiting for dependencies, not 40 minutes of queue, and the gates read it so."""
    from hud.figures import queries

    ci = downstream(level="L3", device="npu")
    dispatch = ci.dispatch(sent_ago=300)
    run = {"run_id": "555", "run_attempt": "1"}
    assert ci.post(ci.body("pull_request.in_progress", dispatch, job_name="build", **run)).status_code == 200
    JobResult.objects.update(started_at=timezone.now() - timedelta(minutes=40))  # the build ran 40 minutes
    assert ci.post(ci.body("pull_request.completed.failure", dispatch, job_name="build", conclusion="success", **run))

    assert ci.post(ci.body("pull_request.in_progress", dispatch, job_name="test", **run)).status_code == 200

    build, test = JobResult.objects.get(job_name="build"), JobResult.objects.get(job_name="test")
    assert 299 <= build.queue_time <= 310 and build.dependency_wait is None  # it opened the run
    assert test.queue_time is None and 40 * 60 <= test.dependency_wait <= 40 * 60 + 10
    r = queries.readiness(now=timezone.now() + timedelta(minutes=1))[ci.backend.id]
    assert 299 <= r.demotion.queue_avg <= 310  # the queue gate reads the run's queue time, once per run
    assert 40 * 60 <= r.demotion.dependency_avg <= 40 * 60 + 10  # beside it, gating nothing
    page = client.get(f"/oot/{ci.repo}/jobs/{test.pk}/").content.decode()
    assert "Waiting for dependencies</th><td data-dependency-wait>40" in page


def test_a_re_run_attempt_has_no_queue_time_but_its_later_jobs_wait_for_dependencies(downstream):
    ci = downstream()
    dispatch = ci.dispatch(sent_ago=3600)
    run = {"run_id": "556", "run_attempt": "2"}

    assert ci.post(ci.body("pull_request.in_progress", dispatch, job_name="build", **run)).status_code == 200
    assert ci.post(ci.body("pull_request.in_progress", dispatch, job_name="test", **run)).status_code == 200

    build, test = JobResult.objects.get(job_name="build"), JobResult.objects.get(job_name="test")
    assert (build.queue_time, build.dependency_wait) == (None, None)  # a re-run reuses a dispatch hours old
    assert test.queue_time is None and test.dependency_wait is not None


# --- what a callback costs (issue 30) --------------------------------------------------------------


def test_a_callback_is_two_statements(downstream, client, django_assert_num_queries, monkeypatch):
    """One read (the backend, the dispatch with its delivery, the job attempt, for an in_progress its run's first
    start: job_reports.callback_known) and the job's write: pinned so that a change that adds a round trip to every
    callback is seen. The worker's follow-up is not counted."""
    from django_q.brokers import get_broker
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", False)  # queued, as in production, not run at once as the tests' Q_SYNC does
    ci = downstream()
    dispatch = ci.dispatch()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {ci.issuer.token(repository=ci.repo)}"}

    for name in ("pull_request.in_progress", "pull_request.completed.failure"):
        body = json.dumps(ci.body(name, dispatch))
        with django_assert_num_queries(2):
            response = client.post("/github/callback", body, content_type="application/json", **auth)
        assert response.status_code == 200, response.content
    get_broker().purge_queue()


def test_a_large_callback_is_read_after_its_caller_may_report(downstream, client):
    """A body over EARLY_BODY_BYTES is not checked for a caller the allowlist refuses (403, not 400), and one from a
    caller that may report is applied as a small one is: the backend read alone, then the rest."""
    from relay.endpoints.callback import EARLY_BODY_BYTES

    ci = downstream()
    dispatch = ci.dispatch()
    completed = ci.body("pull_request.completed.failure", dispatch)
    completed["workflow"]["test_results"]["failed_tests"] = [f"test_ops.py::test_{n}: " + "x" * 90 for n in range(800)]
    large = json.dumps(completed)
    assert len(large) > EARLY_BODY_BYTES
    stranger = {"HTTP_AUTHORIZATION": f"Bearer {ci.issuer.token(repository='someone/else')}"}
    broken = large[:-1]  # not JSON

    refused = client.post("/github/callback", broken, content_type="application/json", **stranger)
    started = ci.post(ci.body("pull_request.in_progress", dispatch))
    applied = ci.post(completed)

    assert refused.status_code == 403 and "not in the OOT CI allowlist" in refused.json()["detail"]
    assert (started.status_code, applied.status_code) == (200, 200), applied.content
    job = JobResult.objects.get()
    assert (job.status, job.conclusion, len(job.failed_tests)) == ("completed", "failure", 800)
    assert job.execution_time is not None


def test_a_callback_is_answered_in_json_whatever_it_accepts(downstream):
    """The write endpoints do not negotiate (relay.endpoints.requests.JsonAnswer): a client that asks for HTML, or
    for nothing the relay renders, still gets its JSON answer, and a refusal its JSON detail."""
    ci = downstream()
    dispatch = ci.dispatch()

    accepted = ci.post(ci.body("pull_request.in_progress", dispatch), headers={"Accept": "text/html"})
    refused = ci.post(b"{", headers={"Accept": "application/xml"})

    assert (accepted.status_code, accepted.headers["Content-Type"]) == (200, "application/json")
    assert accepted.json()["status"] == "in_progress"
    assert (refused.status_code, refused.headers["Content-Type"]) == (400, "application/json")
    assert "JSON" in refused.json()["detail"]
