"""The "Re-run" buttons of our check runs: check_run / check_suite rerequested webhooks re-run the failed jobs
of the downstream runs behind them, through the fake GitHub, once per distinct run."""

import time
from urllib.parse import parse_qsl

import pytest
from django_q.models import Schedule

from ootci.models import Delivery, Dispatch, JobResult, PullRequest
from relay import tasks
from tests.fakes.github import Reply
from tests.fakes.oidc import HEAD
from tests.relay.conftest import APP_ID, fixture_json, run_due_retries

pytestmark = pytest.mark.django_db(transaction=True)

UPSTREAM = "pytorch/pytorch"
RUN_ID = "24033272679"


def reruns(fake, repo: str = r"[^/]+/[^/]+", run_id: str = r"\d+"):
    return fake.requests_to("POST", f"/repos/{repo}/actions/runs/{run_id}/rerun-failed-jobs")


@pytest.fixture
def failed_job(fake_github, downstream):
    """Make an L4 backend whose job failed on PR #4242, with its check run upstream; returns (ci, check run)."""

    def make(level: str = "L4", job_name: str = "test-npu-float32", ci=None, **fields):
        if ci is None:
            ci = downstream(level, device="npu", **fields)
            ci.dispatch()
        dispatch = Dispatch.objects.get(backend=ci.backend)
        body = ci.body("pull_request.completed.failure", dispatch, job_name=job_name)
        assert ci.post(body).status_code == 200
        job = JobResult.objects.get(backend=ci.backend, job_name=job_name)
        return ci, fake_github.check_runs.get(job.upstream_check_run_id)

    return make


@pytest.fixture
def rerequest(post_webhook, settings, fake_github):
    """Post a check_run/check_suite rerequested webhook from the upstream repo about ``subject``."""
    settings.UPSTREAM_REPO = UPSTREAM

    def post(event: str, subject: dict, *, delivery_id: str | None = None):
        payload = fixture_json(f"{event}.rerequested.payload")
        payload["repository"]["full_name"] = UPSTREAM
        payload[event] = subject
        return post_webhook(event, payload, delivery_id=delivery_id)

    return post


def test_a_check_run_rerun_reruns_the_failed_jobs_of_its_downstream_run(fake_github, failed_job, rerequest):
    ci, check_run = failed_job()

    response = rerequest("check_run", fake_github._check_run_json(check_run), delivery_id="rr-1")

    assert response.status_code == 202
    assert response.json() == {"ok": True, "delivery_id": "rr-1", "rerun": "queued"}
    [rerun] = reruns(fake_github)
    assert (rerun.path, rerun.status) == (f"/repos/{ci.repo}/actions/runs/{RUN_ID}/rerun-failed-jobs", 201)
    assert rerun.headers["authorization"].split()[1] in fake_github.tokens  # as the App's installation
    # Recorded for the PR page: the request, who asked, and on which commit.
    delivery = Delivery.objects.get(delivery_id="rr-1")
    assert (delivery.event, delivery.action, delivery.head_sha) == ("check_run", "rerequested", HEAD)
    assert delivery.pull_request == PullRequest.objects.get(number=4242)
    assert delivery.payload["sender"]["login"]


def test_a_run_already_running_is_not_an_error(fake_github, failed_job, rerequest):
    ci, check_run = failed_job()
    assert rerequest("check_run", fake_github._check_run_json(check_run)).status_code == 202

    response = rerequest("check_run", fake_github._check_run_json(check_run), delivery_id="rr-2")

    assert response.status_code == 202
    assert [r.status for r in reruns(fake_github)] == [201, 403]
    assert not Schedule.objects.filter(func="relay.tasks.rerun_request").exists()
    assert tasks.rerun_request(Delivery.objects.get(delivery_id="rr-2").pk) == {"already_running": 1}


def test_a_redelivered_rerun_request_reruns_once(fake_github, failed_job, rerequest):
    _, check_run = failed_job()
    assert rerequest("check_run", fake_github._check_run_json(check_run), delivery_id="rr-1").status_code == 202

    response = rerequest("check_run", fake_github._check_run_json(check_run), delivery_id="rr-1")

    assert response.status_code == 200 and response.json()["duplicate"] is True
    assert len(reruns(fake_github)) == 1


def test_a_check_run_of_another_app_is_ignored(fake_github, failed_job, rerequest):
    ci, _ = failed_job()
    theirs = fake_github.check_run_add(
        UPSTREAM,
        name="oot/npu/npu-ci/test-npu-float32",
        head_sha=HEAD,
        app_id=999,
        external_id=f"oot:{ci.backend.pk}:{RUN_ID}",
    )

    response = rerequest("check_run", fake_github._check_run_json(theirs))

    assert response.status_code == 200
    assert response.json() == {"ignored": True, "reason": "not a check_run of our GitHub App"}
    assert not reruns(fake_github)
    assert not Delivery.objects.filter(event="check_run").exists()


@pytest.mark.parametrize(
    "external_id",
    [
        f"{RUN_ID}:4242",  # the reference relay's format
        "oot:999999:24033272679",  # no such backend
        "oot:{backend}:1",  # a run we never recorded
        "oot:{backend}:not-a-number",  # not a GitHub Actions run
        "",
    ],
)
def test_a_check_run_that_is_not_one_of_our_jobs_is_ignored(fake_github, failed_job, rerequest, external_id):
    ci, check_run = failed_job()
    subject = {**fake_github._check_run_json(check_run), "external_id": external_id.format(backend=ci.backend.pk)}

    response = rerequest("check_run", subject)

    assert response.status_code == 200 and response.json()["ignored"] is True
    assert not reruns(fake_github)


def test_a_backend_no_longer_at_l3_or_l4_is_not_rerun(fake_github, failed_job, rerequest):
    ci, check_run = failed_job()
    ci.backend.change_level("L2", actor="test", reason="flaky")

    response = rerequest("check_run", fake_github._check_run_json(check_run))

    assert response.json() == {"ignored": True, "reason": "not a check run of an OOT CI job at L3 or L4"}
    assert not reruns(fake_github)


def test_a_check_run_without_our_external_id_is_answered_200_ignored(rerequest):
    response = rerequest("check_run", {"id": 4, "app": {"id": "4242"}, "external_id": None})
    assert response.status_code == 200 and response.json()["ignored"] is True


def test_a_check_run_that_is_not_an_object_is_answered_400(rerequest):
    response = rerequest("check_run", "not an object")
    assert response.status_code == 400
    assert response.json() == {"detail": "The payload's check_run must be an object."}


def test_a_check_suite_rerun_reruns_each_distinct_downstream_run_once(fake_github, failed_job, rerequest, downstream):
    ci_a, _ = failed_job()
    failed_job(ci=ci_a, job_name="test-npu-bfloat16")  # the same downstream run: two failed checks
    ci_b, _ = failed_job()
    # Enough check runs that the suite's listing takes two pages.
    for i in range(100):
        fake_github.check_run_add(
            UPSTREAM,
            name=f"oot/npu/extra/{i}",
            head_sha=HEAD,
            status="completed",
            conclusion="failure",
            external_id=f"oot:{ci_a.backend.pk}:{RUN_ID}",
        )
    suite = fixture_json("check_suite.rerequested.payload")["check_suite"]
    suite.update(id=fake_github.check_suite_id(UPSTREAM, HEAD), head_sha=HEAD, app={"id": APP_ID})

    response = rerequest("check_suite", suite, delivery_id="cs-1")

    assert response.status_code == 202
    pages = fake_github.requests_to("GET", f"/repos/{UPSTREAM}/check-suites/{suite['id']}/check-runs")
    assert [dict(parse_qsl(p.query)) for p in pages] == [{"per_page": "100", "page": str(n)} for n in (1, 2)]
    assert sorted(r.path for r in reruns(fake_github)) == sorted(
        f"/repos/{ci.repo}/actions/runs/{RUN_ID}/rerun-failed-jobs" for ci in (ci_a, ci_b)
    )
    assert Delivery.objects.get(delivery_id="cs-1").pull_request.number == 4242


def test_a_check_suite_of_another_app_is_ignored(fake_github, failed_job, rerequest):
    failed_job()
    suite = fixture_json("check_suite.rerequested.payload")["check_suite"]  # app 29310, not ours

    response = rerequest("check_suite", suite)

    assert response.json() == {"ignored": True, "reason": "not a check_suite of our GitHub App"}
    assert not fake_github.requests_to("GET", r"/repos/.+/check-suites/\d+/check-runs")
    assert not reruns(fake_github)


def test_a_check_suite_without_an_id_is_ignored(rerequest):
    response = rerequest("check_suite", {"app": {"id": APP_ID}, "head_sha": HEAD})
    assert response.status_code == 200
    assert response.json() == {"ignored": True, "reason": "the check_suite has no id"}


def test_a_github_failure_on_a_rerun_is_retried_later(fake_github, failed_job, rerequest):
    ci, check_run = failed_job()
    fake_github.script(
        "POST", f"/repos/{ci.repo}/actions/runs/{RUN_ID}/rerun-failed-jobs", Reply(502, {"message": "Bad"})
    )

    assert rerequest("check_run", fake_github._check_run_json(check_run)).status_code == 202
    assert Schedule.objects.filter(func="relay.tasks.rerun_request").count() == 1
    time.sleep(0.1)
    run_due_retries("relay.tasks.rerun_request")

    assert [r.status for r in reruns(fake_github)] == [502, 201]
    assert not Schedule.objects.filter(func="relay.tasks.rerun_request").exists()
