"""POST /api/crcr/results: the reference relay's HUD forward, upserted into JobResult."""

import json

import pytest

from ootci.models import Delivery, Dispatch, JobFailure, JobResult
from tests.fakes.oidc import HEAD, NIGHTLY_SHA, reporter_body

TOKEN = "hud-bot-token-for-tests"
URL = "/api/crcr/results"


@pytest.fixture
def backend(make_backend, settings):
    settings.HUD_INGEST_TOKEN = TOKEN
    return make_backend(repo="ascend/pytorch-npu", level="L3")


def forwarded(name: str, *, queue_time=None, execution_time=None, level="L3", **workflow) -> dict:
    """The body the reference relay sends its HUD for a callback body of the public reporter."""
    return {
        "trusted": {
            "ci_metrics": {"queue_time": queue_time, "execution_time": execution_time},
            "verified_repo": "ascend/pytorch-npu",
            "downstream_repo_level": level,
        },
        "untrusted": {"callback_payload": reporter_body(name, **workflow)},
    }


def post(client, body, *, token: str | None = TOKEN):
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    headers = {} if token is None else {"x-hud-internal-bot": token}
    return client.post(URL, data=data, content_type="application/json", headers=headers)


def test_it_upserts_an_in_progress_then_a_completed_report(client, backend):
    first = post(client, forwarded("pull_request.in_progress", queue_time=42.5))
    second = post(client, forwarded("pull_request.completed.failure", execution_time=1800.25))

    assert first.status_code == 200, first.content
    assert second.json() == {
        "ok": True,
        "status": "completed",
        "dynamoKey": "ascend/pytorch-npu/72d3162e-cc78-11e3-81ab-4c9367dc0958/npu-ci/test-npu-float32/98765432100",
    }
    job = JobResult.objects.get()
    assert (job.backend, job.source, job.event_type, job.pr_number, job.head_sha) == (
        backend,
        "ingest",
        "pull_request",
        4242,
        HEAD,
    )
    assert (job.status, job.conclusion, job.level) == ("completed", "failure", "L3")
    assert job.queue_time == 42.5  # the completed report's null did not erase it
    assert job.execution_time == 1800.25
    assert job.started_at.isoformat() == "2026-11-20T10:15:30+00:00"  # kept: the completed report says null
    assert job.completed_at.isoformat() == "2026-11-20T10:45:12+00:00"
    assert (job.passed, job.failed, job.skipped) == (8430, 2, 20)
    assert job.run_url == "https://github.com/ascend/pytorch-npu/actions/runs/24033272679"
    assert job.artifact_url == "https://ascend.github.io/ci-results/24033272679/"


def test_a_late_in_progress_does_not_reopen_a_completed_job(client, backend):
    post(client, forwarded("pull_request.completed.failure"))

    response = post(client, forwarded("pull_request.in_progress", queue_time=3.0))

    assert response.status_code == 200
    job = JobResult.objects.get()
    assert (job.status, job.conclusion, job.queue_time) == ("completed", "failure", 3.0)


def test_it_links_a_report_to_our_own_dispatch(client, backend):
    delivery = Delivery.objects.create(
        delivery_id="72d3162e-cc78-11e3-81ab-4c9367dc0958", event="pull_request", upstream_repo="p/p", payload={}
    )
    dispatch = Dispatch.objects.create(delivery=delivery, backend=backend, status="sent")

    post(client, forwarded("pull_request.in_progress"))

    assert JobResult.objects.get().dispatch == dispatch


def test_it_stores_a_nightly_report_with_its_sha(client, backend):
    response = post(client, forwarded("nightly.completed"))

    assert response.status_code == 200, response.content
    job = JobResult.objects.get()
    assert (job.event_type, job.head_sha, job.pr_number, job.conclusion) == ("nightly", NIGHTLY_SHA, None, "success")


def test_it_accepts_the_body_as_a_json_string(client, backend):
    response = post(client, json.dumps(json.dumps(forwarded("pull_request.in_progress"))))

    assert response.status_code == 200, response.content
    assert JobResult.objects.count() == 1


def test_a_run_attempt_that_is_not_a_number_counts_as_1(client, backend):
    post(client, forwarded("pull_request.in_progress", run_attempt="first"))

    assert JobResult.objects.get().run_attempt == 1


def test_it_is_off_without_a_configured_token(client, backend, settings):
    settings.HUD_INGEST_TOKEN = ""

    response = post(client, forwarded("pull_request.in_progress"), token="")

    assert response.status_code == 404
    assert "HUD_INGEST_TOKEN is not set" in response.json()["detail"]


@pytest.mark.parametrize("token", [None, "", "wrong", TOKEN + "x"])
def test_it_refuses_a_wrong_or_missing_token(client, backend, token):
    response = post(client, forwarded("pull_request.in_progress"), token=token)

    assert response.status_code == 401
    assert response.json() == {"detail": "Missing or wrong x-hud-internal-bot token."}
    assert not JobResult.objects.exists()


def test_it_accepts_exactly_2_mib_and_refuses_more(client, backend):
    body = forwarded("pull_request.in_progress")
    body["untrusted"]["callback_payload"]["payload"]["padding"] = ""
    size = len(json.dumps(body).encode())
    body["untrusted"]["callback_payload"]["payload"]["padding"] = "x" * (2 * 1024 * 1024 - size)
    exact = json.dumps(body)
    assert len(exact.encode()) == 2 * 1024 * 1024

    assert post(client, exact).status_code == 200
    too_big = post(client, exact + " ")
    assert too_big.status_code == 413
    assert too_big.json() == {"detail": "Payload exceeds 2MB limit."}


def _drop(body, *path):
    node = body
    for name in path[:-1]:
        node = node[name]
    del node[path[-1]]
    return body


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        (lambda b: _drop(b, "untrusted"), "untrusted: This field is required."),
        (lambda b: _drop(b, "trusted", "verified_repo"), "trusted.verified_repo: This field is required."),
        (
            lambda b: _drop(b, "untrusted", "callback_payload", "workflow", "job_name"),
            "untrusted.callback_payload.workflow.job_name: This field is required.",
        ),
        (
            lambda b: b["untrusted"]["callback_payload"]["workflow"].update(check_run_id=None) or b,
            "untrusted.callback_payload.workflow.check_run_id: This field may not be null.",
        ),
        (
            lambda b: b["untrusted"]["callback_payload"]["workflow"].update(started_at="yesterday") or b,
            "untrusted.callback_payload.workflow.started_at: Datetime has wrong format.",
        ),
        (lambda b: b["trusted"].update(verified_repo="someone/else") or b, "someone/else is not in the OOT CI"),
    ],
)
def test_it_answers_a_bad_body_with_400(client, backend, change, detail):
    response = post(client, change(forwarded("pull_request.in_progress")))

    assert response.status_code == 400, response.content
    assert response.json()["detail"].startswith(detail)
    assert not JobResult.objects.exists()


def test_it_answers_a_body_that_is_not_json_with_400(client, backend):
    response = post(client, b"{nope")

    assert response.status_code == 400
    assert response.json()["detail"].startswith("The body is not valid JSON")


def test_a_forwarded_failed_job_is_classified_from_its_github_log(
    client, backend, failing_run, django_capture_on_commit_callbacks
):
    failing_run(backend.repo)

    with django_capture_on_commit_callbacks(execute=True):
        response = post(client, forwarded("pull_request.completed.failure"))

    assert response.status_code == 200, response.content
    job = JobResult.objects.get()
    assert (job.failure.rule_name, job.failure.line_number) == ("linker undefined reference", 5)
    assert job.failure_class == "build"


def test_a_forwarded_in_progress_job_is_not_classified(
    client, backend, failing_run, fake_github, django_capture_on_commit_callbacks
):
    failing_run(backend.repo)

    with django_capture_on_commit_callbacks(execute=True) as queued:
        post(client, forwarded("pull_request.in_progress"))

    assert queued == [] and not JobFailure.objects.exists()
    assert fake_github.requests_to("GET", r"/repos/.*/actions/runs/\d+/attempts/\d+/jobs") == []
