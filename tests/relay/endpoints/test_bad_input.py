"""Hostile input to the relay, one family at a time: each is a 4xx naming what is wrong, never a 500, nothing stored.

The families are those a black-box attack found (issue 13): text PostgreSQL cannot store (NUL, lone surrogates),
numbers and dates out of range, over-long SHAs and URLs, deep nesting, NaN and Infinity, a non-ASCII signature
header, malformed OIDC token headers and claims, a re-run request whose sender is not an object.
"""

import base64
import json
import uuid

import pytest
import requests

from ootci.models import CallbackRejection, Delivery, Dispatch, JobResult, PullRequest
from tests.fakes.oidc import reporter_body
from tests.relay.conftest import UPSTREAM, fixture_json, mutated, sign

OPENED = fixture_json("pull_request.opened.payload")


def nothing_stored() -> bool:
    return not (Delivery.objects.exists() or PullRequest.objects.exists() or Dispatch.objects.exists())


@pytest.fixture
def relayed(make_backend, upstream):
    make_backend(repo="org/npu", level="L4", device="npu")


@pytest.mark.parametrize(
    ("path", "key", "value", "field"),
    [
        (("pull_request",), "title", "fix\x00", "pull_request.title"),
        (("pull_request",), "body", "lone \ud800 surrogate", "pull_request.body"),
        (("pull_request", "labels", 0), "name", "bad\x00label", "pull_request.labels[0].name"),
        (("repository",), "description", "\udfff", "repository.description"),  # a field the relay never reads
    ],
)
@pytest.mark.django_db
def test_a_webhook_with_text_postgresql_cannot_store_is_refused(post_webhook, relayed, path, key, value, field):
    payload = fixture_json("pull_request.labeled.payload")
    payload["repository"]["full_name"] = UPSTREAM
    node = payload
    for step in path:
        node = node[step]
    node[key] = value

    response = post_webhook("pull_request", payload)

    assert response.status_code == 400
    assert response.json()["detail"].startswith(f"The body's {field} holds a")
    assert nothing_stored()


@pytest.mark.parametrize(
    ("path", "key", "value", "detail"),
    [
        (("pull_request",), "number", 2**31, "pull_request.number must be an integer from 0 to 2147483647"),
        (("pull_request",), "number", -1, "pull_request.number must be an integer from 0 to 2147483647"),
        (("pull_request",), "created_at", "2024-02-30T10:00:00Z", "pull_request.created_at must be a real ISO 8601"),
        (("pull_request",), "updated_at", "2024-02-01T25:00:00Z", "pull_request.updated_at must be a real ISO 8601"),
        (("pull_request",), "updated_at", "0001-01-01T00:00:00+05:00", "pull_request.updated_at must be a real"),
        (("pull_request", "head"), "sha", "a" * 41, "pull_request.head.sha is 41 characters long; at most 40 fit"),
        (("pull_request", "head"), "sha", "a" * 5000, "pull_request.head.sha is 5000 characters long"),
        (("pull_request",), "html_url", "https://github.com/" + "x" * 600, "pull_request.html_url is 619 characters"),
        ((), "action", "o" * 51, None),  # an unknown action of a routed event is ignored: nothing stored
    ],
)
@pytest.mark.django_db
def test_a_webhook_value_that_does_not_fit_its_column_is_refused(post_webhook, relayed, path, key, value, detail):
    payload = mutated({**OPENED, "repository": {**OPENED["repository"], "full_name": UPSTREAM}}, path, key, value)

    response = post_webhook("pull_request", payload)

    if detail is None:
        assert response.json() == {"ignored": True}
    else:
        assert response.status_code == 400
        assert response.json()["detail"].startswith(f"The payload's {detail}"), response.json()
    assert nothing_stored()


@pytest.mark.django_db
def test_a_push_with_an_over_long_action_is_refused(post_webhook, relayed):
    payload = {**fixture_json("push.payload"), "action": "x" * 51}
    payload["repository"]["full_name"] = UPSTREAM

    response = post_webhook("push", payload)

    assert response.status_code == 400
    assert response.json()["detail"].startswith("The payload's action is 51 characters long")
    assert nothing_stored()


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b'{"a":' * 2000 + b"1" + b"}" * 2000, "The body is JSON nested too deeply"),
        (b'{"a":' * 100 + b"1" + b"}" * 100, "The body is JSON nested too deeply (more than 64 levels, at a.a."),
        (b'{"zen": NaN}', "The body is not valid JSON (NaN is not a JSON number)"),
        (b'{"zen": [1, -Infinity]}', "The body is not valid JSON (-Infinity is not a JSON number)"),
        (b'{"zen": 1e999}', "The body is not valid JSON (1e999 is too large a number)"),
        (b'{"zen": "\\u0000"}', "The body's zen holds a NUL character"),
        (b'{"z\\u0000": 1}', "The body has a key that holds a NUL character"),
        (b'{"zen": "\xed\xa0\x80"}', "The body's zen holds a lone surrogate"),
        (b'{"zen": "\xff"}', "The body is not valid JSON (not UTF-8 text)"),
    ],
)
@pytest.mark.django_db
def test_a_signed_body_that_cannot_be_read_or_stored_is_refused(client, settings, relayed, body, detail):
    headers = {
        "X-GitHub-Event": "ping",
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(body, settings.GITHUB_WEBHOOK_SECRET),
    }

    response = client.post("/github/webhook", data=body, content_type="application/json", headers=headers)

    assert response.status_code == 400
    assert response.json()["detail"].startswith(detail), response.json()


@pytest.mark.django_db
def test_a_delivery_id_with_a_nul_is_refused(post_webhook, relayed):
    payload = {**OPENED, "repository": {**OPENED["repository"], "full_name": UPSTREAM}}

    response = post_webhook("pull_request", payload, delivery_id="abc\x00def")

    assert response.status_code == 400
    assert response.json()["detail"] == "X-GitHub-Delivery holds a NUL character."
    assert nothing_stored()


@pytest.mark.django_db
def test_a_signature_header_that_is_not_ascii_is_a_bad_signature(post_webhook, relayed):
    response = post_webhook("pull_request", OPENED, signature="sha256=ü")

    assert response.status_code == 401
    assert response.json() == {"detail": "Bad signature."}


@pytest.mark.parametrize("event", ["check_run", "check_suite"])
@pytest.mark.django_db
def test_a_rerun_request_whose_sender_is_text_is_refused(post_webhook, relayed, event):
    payload = fixture_json(f"{event}.rerequested.payload")
    payload["repository"]["full_name"] = UPSTREAM
    payload["sender"] = "octocat"

    response = post_webhook(event, payload)

    assert response.status_code == 400
    assert response.json() == {"detail": "The payload's sender must be an object or null."}
    assert nothing_stored()


@pytest.mark.django_db
def test_a_webhook_over_djangos_2_5_mb_limit_is_accepted(post_webhook, relayed):
    payload = {**OPENED, "repository": {**OPENED["repository"], "full_name": UPSTREAM}}
    payload["pull_request"] = {**payload["pull_request"], "body": "x" * (5 * 1024 * 1024)}

    response = post_webhook("pull_request", payload)

    assert response.status_code == 202, response.content
    assert Delivery.objects.get().payload["pull_request"]["body"] == "x" * (5 * 1024 * 1024)


@pytest.mark.django_db
def test_a_webhook_over_25_mb_is_refused_with_413(client, settings, relayed):
    body = b'{"zen": "' + b"x" * (25 * 1024 * 1024) + b'"}'
    headers = {"X-GitHub-Event": "ping", "X-Hub-Signature-256": sign(body, settings.GITHUB_WEBHOOK_SECRET)}

    response = client.post("/github/webhook", data=body, content_type="application/json", headers=headers)

    assert response.status_code == 413
    assert response.json()["detail"].endswith("this endpoint takes at most 26214400 bytes.")


# --- callbacks ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [("status", "in_progress\x00"), ("conclusion", "fail\ud800ure"), ("name", "\x00"), ("run_id", "\udc80")],
)
def test_a_callback_with_text_postgresql_cannot_store_is_refused(downstream, field, value):
    ci = downstream()
    body = ci.body("pull_request.completed.failure", ci.dispatch())
    body["workflow"][field] = value

    response = ci.post(body)

    assert response.status_code == 400
    assert response.json()["detail"].startswith(f"The body's workflow.{field} holds a"), response.json()
    assert not JobResult.objects.exists()
    assert CallbackRejection.objects.get().status_code == 400


def test_failed_test_names_and_messages_are_stripped_of_what_postgresql_cannot_store(downstream):
    ci = downstream()
    body = ci.body("pull_request.completed.failure", ci.dispatch())
    body["workflow"]["test_results"]["failed_tests"] = ["test_a\x00", {"name": "test_\ud800b", "message": "x\x00y"}]

    response = ci.post(body)

    assert response.status_code == 200, response.text
    assert JobResult.objects.get().failed_tests == ["test_a", "test_b: xy"]


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        (b'{"delivery_id": NaN}', "The body is not valid JSON (NaN is not a JSON number)"),
        (b'{"payload": {"x": Infinity}}', "The body is not valid JSON (Infinity is not a JSON number)"),
        (b'{"payload": ' * 70 + b"1" + b"}" * 70, "The body is JSON nested too deeply"),
    ],
)
def test_a_callback_body_with_nan_or_deep_nesting_is_refused(downstream, raw, detail):
    ci = downstream()

    response = ci.post(raw)

    assert response.status_code == 400
    assert response.json()["detail"].startswith(detail)


def _unsigned_token(header: dict, claims: dict) -> str:
    """A token with a header PyJWT would not write (kid as a list, crit entries); the signature is junk."""

    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part(header)}.{part(claims)}.c2lnbmF0dXJl"


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        ({"alg": "RS256", "kid": ["a", "b"]}, "Key ID header parameter must be a string"),
        ({"alg": "RS256", "kid": 7}, "Key ID header parameter must be a string"),
        ({"alg": "RS256", "kid": "k", "crit": ["exp"]}, "Unsupported critical extension: exp"),
        ({"alg": "RS256", "kid": "k", "crit": [5]}, "Invalid 'crit' header"),
        ({"alg": "RS256", "kid": "k", "crit": "b64"}, "Invalid 'crit' header"),
    ],
)
def test_a_token_with_a_malformed_header_is_refused_and_counted(downstream, oidc_issuer, header, detail):
    ci = downstream()
    token = _unsigned_token(header, {"iss": oidc_issuer.issuer, "repository": ci.repo})

    response = ci.post(reporter_body("nightly.completed"), token=token)

    assert response.status_code == 401
    assert response.json()["detail"].startswith("The authorization token is not a well-formed JWT")
    assert detail in response.json()["detail"]
    assert list(CallbackRejection.objects.values_list("repo", "status_code")) == [("", 401)]


@pytest.mark.parametrize(
    ("repository", "detail"),
    [
        ("org/npu\x00", "The token's 'repository' claim holds a NUL character."),
        ("org/\ud800", "The token's 'repository' claim holds a lone surrogate"),
        ("org/" + "n" * 200, "The token's 'repository' claim is 204 characters long; at most 140 are accepted."),
    ],
)
def test_a_token_whose_repository_claim_cannot_be_stored_is_refused_and_counted(
    downstream, oidc_issuer, repository, detail
):
    ci = downstream()

    response = ci.post(reporter_body("nightly.completed"), token=oidc_issuer.token(repository=repository))

    assert response.status_code == 401
    assert response.json()["detail"].startswith(detail)
    assert list(CallbackRejection.objects.values_list("repo", "status_code")) == [("", 401)]
    assert not JobResult.objects.exists()


def test_a_signed_token_whose_expiry_is_infinite_is_refused(downstream, oidc_issuer):
    ci = downstream()
    token = oidc_issuer.token(repository=ci.repo, exp=float("inf"))

    response = ci.post(reporter_body("nightly.completed"), token=token)

    assert response.status_code == 401
    assert CallbackRejection.objects.get().status_code == 401


def test_a_refusal_quoting_a_lone_surrogate_is_still_answered(downstream):
    ci = downstream()
    body = ci.body("pull_request.completed.failure", ci.dispatch())
    raw = json.dumps(body).replace('"delivery_id": "', '"delivery_id": "\\ud800', 1).encode()

    response = requests.post(
        ci.url,
        data=raw,
        headers={"Authorization": f"Bearer {ci.issuer.token(repository=ci.repo)}"},
        timeout=30,
    )

    assert response.status_code == 400
    assert response.json()["detail"] == "The body's delivery_id holds a lone surrogate (an unpaired \\ud800-\\udfff)."
