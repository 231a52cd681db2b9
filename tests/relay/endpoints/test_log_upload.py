"""POST /github/job-log: CI other than GitHub Actions uploads a failed job's log; it is kept and classified."""

from io import StringIO

import requests
from django.core.management import call_command

from ootci.models import FailureRule, JobFailure, JobResult
from tests.relay.conftest import FAILED_JOB_LOG, completed_failure

RUN = "0190a5c2-buildkite-run"


def upload(ci, body: bytes, *, token: str | None = None, **params) -> requests.Response:
    query = {
        "delivery_id": JobResult.objects.first().delivery_id,
        "workflow": "npu-ci",
        "job": "test-npu",
        "run_id": RUN,
    }
    query = {name: value for name, value in (query | params).items() if value is not None}
    token = ci.issuer.token(repository=ci.repo) if token is None else token
    url = ci.url.replace("/github/callback", "/github/job-log")
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "text/plain"}
    return requests.post(url, params=query, data=body, headers=headers, timeout=30)


def buildkite_failure(ci, **workflow):
    return completed_failure(ci, url=f"https://buildkite.com/acme/npu/builds/{RUN}", run_id=RUN, **workflow)


def test_an_upload_without_a_body_or_with_a_nul_in_its_query_is_a_400_not_a_500(downstream, failing_run):
    # Found by the upload fuzzing (tests/fuzz/test_fuzz.py): no body at all left the stream None.
    ci = downstream()
    buildkite_failure(ci)

    response = upload(ci, b"")

    assert response.status_code == 400 and "no body" in response.json()["detail"]
    assert not JobFailure.objects.exclude(log_bytes=None).exists()
    nul = upload(ci, FAILED_JOB_LOG, job="test-npu\x00")  # PostgreSQL cannot compare text with NUL: a 500 before
    assert nul.status_code == 400 and nul.json()["detail"] == "Query parameter job holds a NUL character."


def test_an_uploaded_log_is_kept_and_classified(downstream, failing_run):
    ci = downstream()
    buildkite_failure(ci)

    response = upload(ci, FAILED_JOB_LOG)

    assert response.status_code == 202, response.text  # kept; the classification is a task's
    answer = response.json()
    assert answer["bytes"] == len(FAILED_JOB_LOG) and len(answer["sha256"]) == 64
    assert answer["job_id"] == JobResult.objects.get().pk
    failure = JobFailure.objects.get()
    assert (failure.rule_name, failure.failure_class, failure.line_number) == ("linker undefined reference", "build", 5)
    assert failure.line_url == ""  # not a GitHub log: no line link
    assert JobResult.objects.get().outcome == "test"


def test_uploads_are_refused_with_a_reason(downstream, failing_run):
    ci = downstream()
    buildkite_failure(ci)

    assert upload(ci, b"x", token="not-a-token").status_code == 401
    missing = upload(ci, b"x", job=None)
    assert (missing.status_code, missing.json()["detail"]) == (400, "Missing query parameter: job.")
    no_workflow = upload(ci, b"x", workflow=None)
    assert (no_workflow.status_code, no_workflow.json()["detail"]) == (400, "Missing query parameter: workflow.")
    assert upload(ci, b"x", run_attempt="zero").status_code == 400
    assert upload(ci, b"x", run_id="other").status_code == 404
    assert upload(ci, b"x", workflow="other-workflow").status_code == 404  # the workflow is part of the name
    other = downstream(repo="intel/pytorch-xpu")
    refused = upload(other, b"x")
    assert refused.status_code == 403 and "not yours" in refused.json()["detail"]  # as the test-report upload


def test_job_name_is_still_taken_for_job_and_then_the_workflow_may_be_left_out(downstream, failing_run):
    ci = downstream()
    buildkite_failure(ci)

    response = upload(ci, FAILED_JOB_LOG, workflow=None, job=None, job_name="test-npu")

    assert response.status_code == 202, response.text
    assert JobFailure.objects.get().rule_name == "linker undefined reference"


def test_a_job_name_in_two_workflows_needs_the_workflow(downstream, failing_run):
    ci = downstream()
    dispatch = ci.dispatch()
    fields = {"url": f"https://buildkite.com/acme/npu/builds/{RUN}", "run_id": RUN, "job_name": "test-npu"}
    for workflow in ("npu-ci", "npu-nightly"):  # the same job name in two workflows of the run
        body = ci.body("pull_request.completed.failure", dispatch, **fields)
        body["workflow"]["name"] = workflow
        assert ci.post(body).status_code == 200
    assert JobResult.objects.count() == 2

    ambiguous = upload(ci, FAILED_JOB_LOG, workflow=None, job=None, job_name="test-npu")

    assert ambiguous.status_code == 409 and "name the workflow" in ambiguous.json()["detail"]
    assert upload(ci, FAILED_JOB_LOG, workflow="npu-nightly").status_code == 202


def test_a_passed_jobs_log_is_refused(downstream, failing_run):
    ci = downstream()
    buildkite_failure(ci, conclusion="success")

    refused = upload(ci, FAILED_JOB_LOG)

    assert refused.status_code == 409 and "only failed jobs' logs are kept" in refused.json()["detail"]
    assert not JobFailure.objects.exists()


def test_a_log_over_the_limit_is_refused(downstream, failing_run, settings):
    ci = downstream()
    buildkite_failure(ci)
    settings.JOB_LOG_MAX_BYTES = 10

    refused = upload(ci, FAILED_JOB_LOG)

    assert refused.status_code == 413 and "limited to 10 bytes" in refused.json()["detail"]


def test_reclassify_runs_the_rules_again_over_the_window(downstream, failing_run):
    ci = downstream()
    buildkite_failure(ci)
    upload(ci, FAILED_JOB_LOG)
    FailureRule.objects.filter(name="linker undefined reference").update(enabled=False)
    out = StringIO()

    call_command("reclassify", "--days", "7", stdout=out)

    assert "1 failed jobs in the last 7 days" in out.getvalue() and "[1/1] job" in out.getvalue()
    failure = JobFailure.objects.get()
    assert failure.rule_name != "linker undefined reference" and failure.log_bytes == len(FAILED_JOB_LOG)
