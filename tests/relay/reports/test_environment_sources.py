"""Where a job ran, filled in by what the relay reads itself: the runner of the GitHub job API (the log fetch's call)
and the test report's <properties>; neither overwrites what the callback stated."""

import io

import pytest

from ootci.models import JobResult
from relay.reports import pull
from tests.hud import builders
from tests.relay.conftest import completed_failure


@pytest.fixture
def store(settings, tmp_path):
    settings.TEST_REPORTS_URL = (tmp_path / "reports").as_uri()


def test_the_job_apis_runner_name_and_labels_fill_the_environment(downstream, failing_run, fake_github):
    ci = downstream()
    failing_run(ci.repo)
    run = fake_github.actions_jobs[(ci.repo.lower(), 24033272679, 1)]
    run[1] |= {"runner_name": "npu-07", "labels": ["self-hosted", "npu"]}

    assert completed_failure(ci).status_code == 200

    assert JobResult.objects.get().environment == {"runner": "npu-07", "runner_labels": ["self-hosted", "npu"]}


def test_the_callbacks_runner_wins_over_the_job_api(downstream, failing_run, fake_github):
    ci = downstream()
    failing_run(ci.repo)
    fake_github.actions_jobs[(ci.repo.lower(), 24033272679, 1)][1] |= {"runner_name": "gh-runner-3"}
    dispatch = ci.dispatch()
    fields = {"url": f"https://github.com/{ci.repo}/actions/runs/24033272679", "run_id": "24033272679"}
    body = ci.body("pull_request.completed.failure", dispatch, job_name="test-npu", **fields)

    assert ci.post(body | {"environment": {"runner": "npu-07"}}).status_code == 200

    assert JobResult.objects.get().environment == {"runner": "npu-07"}


REPORT = b"""<?xml version="1.0"?><testsuites><testsuite name="pytest">
<properties><property name="ootci.device" value="Ascend910B"/><property name="device_count" value="8"/>
<property name="torch_version" value="2.6.0"/><property name="runner" value="from-report"/>
<property name="unrelated" value="x"/></properties>
<testcase classname="test_ops.TestOps" name="test_add">
<properties><property name="sdk" value="case-level"/></properties></testcase></testsuite></testsuites>"""


def test_a_reports_properties_fill_what_the_callback_did_not_state(make_backend, store):
    job = builders.job(make_backend("acme/npu"), name="test-1", environment={"runner": "npu-07"})
    report, _ = pull.report_store(job=job, received=pull.spooled(io.BytesIO(REPORT), limit=10**6), source="upload")

    assert pull.report_parse(report_id=report.pk) == "parsed"

    job.refresh_from_db()
    # The suite's properties only (a case's own say nothing of the machine); the callback's runner stays.
    assert job.environment == {"runner": "npu-07", "device": "Ascend910B", "device_count": 8, "torch_version": "2.6.0"}
