"""Buildkite reports over real HTTP, as a Buildkite job does: the reporter (our stand-in for the reference's
report_callback_buildkite.sh, tests/fakes/buildkite_reporter/) runs as a subprocess with a fake ``buildkite-agent`` on
PATH, which asks the fake Buildkite's agent API for a token; the relay verifies it against the fake's key set and
reports as the backend its organization_id/pipeline_id is mapped to.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from django.urls import reverse

from ootci.models import BuildkitePipeline, CallbackRejection, IdentityChange, JobResult, TestReport
from tests.fakes.buildkite import AGENT, REPORTER
from tests.fakes.oidc import NIGHTLY_SHA, Downstream, SigningKey
from tests.relay.conftest import FAILED_JOB_LOG

VLLM = "vllm-project/vllm"
JUNIT = b'<testsuite name="t" tests="2"><testcase classname="test_ops" name="test_add"/>' + (
    b'<testcase classname="test_ops" name="test_mul"><failure message="boom"/></testcase></testsuite>'
)


@pytest.fixture
def vllm(make_backend, buildkite):
    """vLLM at L2 with its Buildkite pipeline mapped, constrained to main; ``job`` is a build of that pipeline."""
    backend = make_backend(repo=VLLM, level="L2")
    job = buildkite.job()
    BuildkitePipeline.objects.create(
        backend=backend,
        organization_id=job.organization_id,
        pipeline_id=job.pipeline_id,
        required_claims={"build_branch": ["main"]},
    )
    return backend, job


def report(live_server, buildkite, job, **env) -> subprocess.CompletedProcess:
    """Run the reporter in ``job``'s environment; ``env`` adds variables (None removes one)."""
    environment = {
        "PATH": os.pathsep.join([str(AGENT), str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": os.environ.get("HOME", "/tmp"),
        **buildkite.agent_env(job),
        "BUILDKITE_OIDC_TOKEN_CLAIMS": "organization_id,pipeline_id",
        "CALLBACK_URL": live_server.url + "/github/callback",
    } | env
    environment = {name: value for name, value in environment.items() if value is not None}
    return subprocess.run(["bash", str(REPORTER)], env=environment, capture_output=True, text=True, timeout=60)


def nightly(**env) -> dict[str, str]:
    return {"DELIVERY_ID_OVERRIDE": NIGHTLY_SHA, "EVENT_TYPE_OVERRIDE": "nightly", **env}


def refusal(result: subprocess.CompletedProcess) -> tuple[str, dict]:
    assert result.returncode != 0, result.stdout
    answer = result.stderr.split("Relay server error response body:\n", 1)[1]
    return result.stderr.split("HTTP ", 1)[1].split(".", 1)[0], json.loads(answer)


def test_the_reporter_reports_a_nightly_build_of_a_mapped_pipeline(live_server, buildkite, vllm):
    backend, job = vllm
    results = json.dumps({"passed": 812, "failed": 0, "skipped": 9})

    result = report(live_server, buildkite, job, **nightly(BUILDKITE_COMMAND_EXIT_STATUS="0", TEST_RESULTS=results))

    assert result.returncode == 0, result.stderr
    assert "HTTP: 200" in result.stdout
    row = JobResult.objects.get()
    assert (row.backend, row.event_type, row.head_sha, row.status, row.conclusion) == (
        backend,
        "nightly",
        NIGHTLY_SHA,
        "completed",
        "success",
    )
    assert (row.run_id, row.run_attempt, row.check_run_id) == (job.build_id, 1, f"{job.build_id}-1")
    assert (row.workflow_name, row.job_name, row.run_url) == ("ci", job.label, job.build_url)
    assert (row.passed, row.failed, row.skipped) == (812, 0, 9)
    (asked,) = buildkite.token_requests
    assert asked == {
        "audience": "pytorch-cross-repo-ci-relay",
        "lifetime": 300,
        "claims": ["organization_id", "pipeline_id"],
    }


def test_a_dispatched_build_reports_its_progress_and_its_retry(live_server, buildkite, oidc_issuer, vllm):
    backend, job = vllm
    job.retry_count = 1
    ci = Downstream(live_server.url, oidc_issuer, backend)
    dispatch = ci.dispatch()
    client_payload = ci.body("pull_request.in_progress", dispatch)
    client_payload.pop("workflow")  # the reporter adds its own
    sent = {"CLIENT_PAYLOAD": json.dumps(client_payload)}

    started = report(live_server, buildkite, job, STATUS="in_progress", **sent)
    finished = report(live_server, buildkite, job, STATUS="completed", CONCLUSION="failure", **sent)

    assert (started.returncode, finished.returncode) == (0, 0), started.stderr + finished.stderr
    row = JobResult.objects.get()
    assert (row.dispatch, row.pr_number, row.status, row.conclusion) == (dispatch, 4242, "completed", "failure")
    assert (row.run_id, row.run_attempt, row.check_run_id) == (job.build_id, 2, f"{job.build_id}-2")
    assert row.execution_time is not None and not row.one_shot


def test_a_fork_branch_build_of_the_mapped_pipeline_is_refused_with_the_reason(live_server, buildkite, vllm):
    backend, main_job = vllm
    fork = buildkite.job(
        organization_id=main_job.organization_id, pipeline_id=main_job.pipeline_id, branch="contributor:fix-add"
    )

    status, answer = refusal(report(live_server, buildkite, fork, **nightly(CONCLUSION="success")))

    assert status == "403"
    assert answer["detail"] == (
        f"Buildkite pipeline vllm/ci ({main_job.organization_id}/{main_job.pipeline_id}) reports as {VLLM} only from "
        "its own builds: build_branch must be 'main' (this token has 'contributor:fix-add')."
    )
    assert not JobResult.objects.exists()
    assert list(CallbackRejection.objects.values_list("repo", "status_code")) == [(VLLM, 403)]


def test_an_unmapped_pipeline_is_refused(live_server, buildkite, vllm):
    other = buildkite.job(pipeline_slug="release")

    status, answer = refusal(report(live_server, buildkite, other, **nightly(CONCLUSION="success")))

    assert status == "403"
    assert answer["detail"].startswith(
        f"Buildkite pipeline vllm/release ({other.organization_id}/{other.pipeline_id}) is not mapped to an OOT CI"
    )
    assert not JobResult.objects.exists()


def test_a_pipeline_that_does_not_ask_for_its_ids_is_told_how(live_server, buildkite, vllm):
    _, job = vllm

    status, answer = refusal(report(live_server, buildkite, job, BUILDKITE_OIDC_TOKEN_CLAIMS=None, **nightly()))

    assert status == "401"
    assert "--claim organization_id,pipeline_id" in answer["detail"]
    assert "BUILDKITE_OIDC_TOKEN_CLAIMS=organization_id,pipeline_id" in answer["detail"]


def test_a_token_with_a_forged_signature_is_refused(live_server, buildkite, vllm):
    _, job = vllm
    buildkite.agent_key = SigningKey(kid=buildkite.signing_key.kid)  # a published key id, another key

    status, answer = refusal(report(live_server, buildkite, job, **nightly(CONCLUSION="success")))

    assert (status, answer) == ("401", {"detail": "The token's signature does not verify."})
    assert not JobResult.objects.exists()


def test_test_reports_and_job_logs_upload_with_the_same_token(live_server, buildkite, vllm, settings, tmp_path):
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    _, job = vllm
    assert report(live_server, buildkite, job, **nightly(CONCLUSION="failure")).returncode == 0
    query = {"delivery_id": NIGHTLY_SHA, "workflow": "ci", "job": job.label, "run_id": job.build_id, "run_attempt": 1}
    token = {"Authorization": f"Bearer {buildkite.token(job=job)}"}

    junit = requests.post(
        live_server.url + "/github/test-report",
        params=query,
        data=JUNIT,
        headers=token | {"Content-Type": "application/xml"},
        timeout=30,
    )
    log = requests.post(
        live_server.url + "/github/job-log",
        params=query,
        data=FAILED_JOB_LOG,
        headers=token | {"Content-Type": "text/plain"},
        timeout=30,
    )

    assert junit.status_code == 202, junit.text
    assert log.status_code == 202, log.text
    assert TestReport.objects.get().job == JobResult.objects.get()
    fork = buildkite.job(organization_id=job.organization_id, pipeline_id=job.pipeline_id, branch="fork")
    refused = requests.post(
        live_server.url + "/github/job-log",
        params=query,
        data=FAILED_JOB_LOG,
        headers={"Authorization": f"Bearer {buildkite.token(job=fork)}", "Content-Type": "text/plain"},
        timeout=30,
    )
    assert refused.status_code == 403 and "build_branch must be 'main'" in refused.json()["detail"]


def test_every_hud_page_links_the_buildkite_build(live_server, buildkite, oidc_issuer, vllm, client):
    backend, job = vllm
    dispatch = Downstream(live_server.url, oidc_issuer, backend).dispatch()
    client_payload = Downstream(live_server.url, oidc_issuer, backend).body("pull_request.in_progress", dispatch)
    client_payload.pop("workflow")
    sent = report(live_server, buildkite, job, CLIENT_PAYLOAD=json.dumps(client_payload), CONCLUSION="failure")
    assert sent.returncode == 0, sent.stderr
    row = JobResult.objects.get()
    org, name = VLLM.split("/")

    for url in (
        reverse("hud:backend", args=[org, name]),
        reverse("hud:pull-request", args=[4242]),
        reverse("hud:job", args=[org, name, row.pk]),
        reverse("hud:api-job", args=[org, name, row.pk]),
        reverse("hud:api-pull-request", args=[4242]),
    ):
        page = client.get(url)
        assert page.status_code == 200, url
        assert job.build_url in page.content.decode(), url


def admin_form(backend, pipelines: list[dict], *, initial: int = 0, reason: str = "") -> dict:
    form = {"repo": backend.repo, "level": backend.level, "device": backend.device, "oncalls": "", "notes": ""}
    form |= {"events": backend.events, "enabled": "on", "exonerate": "unknown", "reason": reason}
    form |= {"nightly_cadence_minutes": "1440", "stale_grace_minutes": "120"}
    for prefix in ("level_changes", "identity_changes"):
        form |= {f"{prefix}-TOTAL_FORMS": "0", f"{prefix}-INITIAL_FORMS": "0"}
    form |= {"buildkite_pipelines-TOTAL_FORMS": str(len(pipelines)), "buildkite_pipelines-INITIAL_FORMS": str(initial)}
    for i, pipeline in enumerate(pipelines):
        form |= {f"buildkite_pipelines-{i}-{field}": value for field, value in pipeline.items()}
    return form


def test_a_map_edit_in_the_admin_takes_effect_without_a_restart(
    live_server, buildkite, make_backend, admin_client, settings
):
    settings.OIDC_IDENTITY_MAP_SECONDS = 2
    backend = make_backend(repo=VLLM, level="L2")
    job = buildkite.job()
    ci = Downstream(live_server.url, buildkite, backend)
    body = ci.body("nightly.completed")

    def answer() -> int:
        return ci.post(body, token=buildkite.token(job=job)).status_code

    def within(status: int, seconds: float) -> float:
        start = time.monotonic()
        while answer() != status:
            assert time.monotonic() - start < seconds, f"not {status} after {seconds} s"
            time.sleep(0.1)
        return time.monotonic() - start

    assert answer() == 403  # unmapped, and the relay has read the map
    mapping = {"organization_id": job.organization_id, "pipeline_id": job.pipeline_id, "required_claims": "{}"}
    url = reverse("admin:ootci_backend_change", args=[backend.pk])
    saved = admin_client.post(url, admin_form(backend, [mapping], reason="vLLM reports from Buildkite"))
    assert saved.status_code == 302, saved.content.decode()[:3000]

    assert within(200, 2 + 1.5) <= 3.5
    pipeline = BuildkitePipeline.objects.get()
    constrained = {"id": str(pipeline.pk), "backend": str(backend.pk), **mapping}
    constrained["required_claims"] = '{"build_branch": ["release"]}'
    saved = admin_client.post(url, admin_form(backend, [constrained], initial=1))
    assert saved.status_code == 302, saved.content.decode()[:3000]
    assert within(403, 2 + 1.5) <= 3.5
    history = list(IdentityChange.objects.order_by("changed_at").values_list("action", "actor", "reason"))
    assert history == [("added", "admin", "vLLM reports from Buildkite"), ("changed", "admin", "")]
