"""POST /github/callback refusals over real HTTP: the allowlist gate, body size, bad bodies. Never a 500."""

import json

import pytest
import requests

from ootci.models import CallbackRejection, JobResult
from tests.fakes.oidc import reporter_body
from tests.relay.conftest import mutated


def test_it_refuses_an_l1_backend(downstream):
    ci = downstream(level="L1")

    response = ci.post(ci.body("pull_request.in_progress", ci.dispatch()))

    assert response.status_code == 403
    assert f"{ci.repo} is at L1" in response.json()["detail"]
    assert not JobResult.objects.exists()
    assert CallbackRejection.objects.get().repo == ci.repo


def test_it_refuses_a_repo_not_in_the_allowlist(downstream, oidc_issuer):
    ci = downstream()

    response = ci.post(reporter_body("nightly.completed"), token=oidc_issuer.token(repository="someone/else"))

    assert response.status_code == 403
    assert response.json() == {"detail": "someone/else is not in the OOT CI allowlist."}
    assert CallbackRejection.objects.get().repo == "someone/else"


def test_it_refuses_a_disabled_backend(downstream):
    ci = downstream(enabled=False)

    response = ci.post(reporter_body("nightly.completed"))

    assert response.status_code == 403
    assert "disabled" in response.json()["detail"]


def test_it_matches_the_repository_claim_ignoring_case(downstream, oidc_issuer):
    ci = downstream()

    response = ci.post(reporter_body("nightly.completed"), token=oidc_issuer.token(repository=ci.repo.upper()))

    assert response.status_code == 200, response.text
    assert JobResult.objects.get().backend == ci.backend


def test_it_refuses_a_body_over_2_mb(downstream):
    ci = downstream()
    body = reporter_body("nightly.completed")
    body["payload"]["padding"] = "x" * (2 * 1024 * 1024)

    response = ci.post(body)

    assert response.status_code == 413
    assert "limited to 2097152 bytes" in response.json()["detail"]
    assert CallbackRejection.objects.get().status_code == 413


def _without(path: str):
    def change(body):
        *parents, last = path.split(".")
        node = body
        for name in parents:
            node = node[name]
        del node[last]
        return body

    return change


def _set(path: str, value):
    def change(body):
        *parents, last = path.split(".")
        node = body
        for name in parents:
            node = node[name]
        node[last] = value
        return body

    return change


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        (_without("delivery_id"), "delivery_id: This field is required."),
        (_without("workflow"), "workflow: This field is required."),
        (_without("workflow.status"), "workflow.status: This field is required."),
        (_set("workflow.status", "queued"), 'workflow.status: "queued" is not a valid choice.'),
        (_set("workflow.conclusion", None), "workflow.conclusion: A completed callback needs a conclusion."),
        (_set("workflow.conclusion", "green"), 'workflow.conclusion: "green" is not a valid choice.'),
        (_without("workflow.name"), "workflow.name: This field is required."),
        (_without("workflow.run_id"), "workflow.run_id: This field is required."),
        (_set("workflow.run_id", ["1"]), "workflow.run_id: Not a valid string."),
        (_set("workflow.run_attempt", "first"), "workflow.run_attempt: A valid integer is required."),
        (_set("workflow.run_attempt", 0), "workflow.run_attempt: Ensure this value is greater than or equal to 1."),
        (_set("workflow", "completed"), "workflow: Invalid data. Expected a dictionary, but got str."),
        (_set("workflow.test_results.passed", -1), "workflow.test_results.passed: Ensure this value is greater"),
        (_set("workflow.test_results.failed", 2**40), "workflow.test_results.failed: Ensure this value is less"),
        (_set("workflow.test_results.failed_tests", "test_a"), "workflow.test_results.failed_tests: Expected a list"),
        (_set("workflow.job_name", "j" * 300), "workflow.job_name: Ensure this field has no more than 255"),
        (_set("workflow.job_name", "nul\x00"), "The body's workflow.job_name holds a NUL character."),
        (_set("delivery_id", 42.5), None),  # a number is coerced to text, then refused as no dispatch (403)
    ],
)
def test_it_answers_a_bad_body_with_400_and_says_what_is_wrong(downstream, change, detail):
    ci = downstream()
    body = change(ci.body("pull_request.completed.failure", ci.dispatch()))

    response = ci.post(body)

    if detail is None:
        assert response.status_code == 403
        return
    assert response.status_code == 400, response.text
    assert response.json()["detail"].startswith(detail), response.json()
    assert not JobResult.objects.exists()
    assert CallbackRejection.objects.get().status_code == 400


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"not-json", "The body is not valid JSON"),
        (b"", "The body is not valid JSON"),
        (b"\xff\xfe", "The body is not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"[1, 2]", "Invalid data. Expected a dictionary, but got list."),
        (b"null", "No data provided"),
    ],
)
def test_it_answers_a_body_that_is_not_a_json_object_with_400(downstream, body, detail):
    ci = downstream()

    response = ci.post(body)

    assert response.status_code == 400, response.text
    assert detail in response.json()["detail"]


def test_a_get_is_not_allowed(downstream):
    ci = downstream()

    response = requests.get(ci.url, timeout=10)

    assert response.status_code == 405
    assert "detail" in response.json()


def test_every_refusal_answers_json_with_a_detail(downstream):
    ci = downstream()
    bodies = [b"{", json.dumps({"delivery_id": "x"}), json.dumps(reporter_body("nightly.completed", status="x"))]

    for body in bodies:
        response = ci.post(body)
        assert response.status_code == 400
        assert response.headers["Content-Type"] == "application/json"
        assert set(response.json()) == {"detail"}


WRONG = {"missing": ..., "null": None, "text": "x", "number": 5, "object": {}}


def callback_mutations(body: dict):
    """The reporter's body with each field of the top level, ``workflow`` and its ``test_results`` removed,
    nulled or given another JSON type."""
    for path in ((), ("workflow",), ("workflow", "test_results")):
        node = body
        for step in path:
            node = node[step]
        for key in node:
            for kind, value in WRONG.items():
                yield f"{'.'.join((*path, key))}={kind}", mutated(body, path, key, value)


def test_it_never_answers_500_to_a_body_of_the_wrong_shape(downstream, settings):
    settings.CALLBACK_RATE_LIMIT_PER_MIN = 10_000
    ci = downstream()
    body = ci.body("pull_request.completed.failure", ci.dispatch())
    failures = []
    for what, changed in callback_mutations(body):
        response = ci.post(changed)
        if response.status_code >= 500 or "detail" not in response.json() and not response.json().get("ok"):
            failures.append(f"{what}: {response.status_code} {response.text[:80]}")
    assert not failures, failures
