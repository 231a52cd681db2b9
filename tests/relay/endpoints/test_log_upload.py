"""POST /github/job-log: CI other than GitHub Actions uploads a failed job's log; it is kept and classified."""

from io import StringIO

import requests
from django.core.management import call_command

from ootci.models import FailureRule, JobFailure, JobResult
from tests.relay.conftest import FAILED_JOB_LOG, completed_failure

RUN = "0190a5c2-buildkite-run"


def upload(ci, body: bytes, *, token: str | None = None, **params) -> requests.Response:
    query = {"delivery_id": JobResult.objects.get().delivery_id, "run_id": RUN, "job_name": "test-npu"} | params
    token = ci.issuer.token(repository=ci.repo) if token is None else token
    url = ci.url.replace("/github/callback", "/github/job-log")
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "text/plain"}
    return requests.post(url, params=query, data=body, headers=headers, timeout=30)


def buildkite_failure(ci, **workflow):
    return completed_failure(ci, url=f"https://buildkite.com/acme/npu/builds/{RUN}", run_id=RUN, **workflow)


def test_an_uploaded_log_is_kept_and_classified(downstream, failing_run):
    ci = downstream()
    buildkite_failure(ci)

    response = upload(ci, FAILED_JOB_LOG)

    assert response.status_code == 200, response.text
    assert response.json()["bytes"] == len(FAILED_JOB_LOG) and len(response.json()["sha256"]) == 64
    failure = JobFailure.objects.get()
    assert (failure.rule_name, failure.failure_class, failure.line_number) == ("linker undefined reference", "build", 5)
    assert failure.line_url == ""  # not a GitHub log: no line link
    assert JobResult.objects.get().outcome == "test"


def test_uploads_are_refused_with_a_reason(downstream, failing_run):
    ci = downstream()
    buildkite_failure(ci)

    assert upload(ci, b"x", token="not-a-token").status_code == 401
    missing = upload(ci, b"x", job_name="")
    assert (missing.status_code, missing.json()["detail"]) == (400, "Missing query parameter: job_name.")
    assert upload(ci, b"x", run_attempt="zero").status_code == 400
    assert upload(ci, b"x", run_id="other").status_code == 404
    other = downstream(repo="intel/pytorch-xpu")
    assert upload(other, b"x").status_code == 404  # another backend's job is not found


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
