"""Signed deliveries whose payload has an unexpected shape: a clear 4xx or an ignore, never a 500.

GitHub signs what it sends, but a payload can still surprise us (a redelivery from an older API version, a
hand-made test delivery): every routed event is replayed with each field the relay reads removed, nulled or
given a wrong type.
"""

import json
import uuid

import pytest

from ootci.models import Delivery
from tests.relay.conftest import fixture_json, mutated, sign

pytestmark = pytest.mark.django_db

WRONG = {"missing": ..., "null": None, "text": "x", "number": 5, "list": [], "object": {}}
# Below the top level, fewer variants per field keep the run short; every field is still tried.
WRONG_DEEP = {"missing": ..., "number": 5, "object": {}}
ROUTED = [
    ("pull_request", "pull_request.opened.payload"),
    ("pull_request", "pull_request.labeled.payload"),
    ("pull_request", "pull_request.closed.payload"),
    ("push", "push.payload"),
    ("check_run", "check_run.rerequested.payload"),
    ("check_suite", "check_suite.rerequested.payload"),
]
# The objects whose fields the handlers read, as paths from the payload's top.
READ = [(), ("pull_request",), ("pull_request", "head"), ("pull_request", "base"), ("check_run",), ("check_suite",)]


def mutations(payload: dict):
    for path in READ:
        node = payload
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        for key in node:
            for kind, value in (WRONG if not path else WRONG_DEEP).items():
                yield f"{'.'.join((*path, key))}={kind}", mutated(payload, path, key, value)


@pytest.mark.parametrize(("event", "name"), ROUTED, ids=[name for _, name in ROUTED])
def test_it_never_answers_500_to_a_payload_of_the_wrong_shape(client, settings, upstream, make_backend, event, name):
    make_backend(repo="org/npu", level="L4", device="npu")
    client.raise_request_exception = False
    failures = []
    for what, payload in mutations(fixture_json(name)):
        body = json.dumps(payload).encode()
        headers = {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(body, settings.GITHUB_WEBHOOK_SECRET),
        }
        response = client.post("/github/webhook", data=body, content_type="application/json", headers=headers)
        if response.status_code >= 500 or (response.status_code >= 400 and "detail" not in response.json()):
            failures.append(f"{what}: {response.status_code}")
    assert not failures, failures


def test_it_names_the_field_that_is_wrong(post_webhook, make_backend):
    make_backend()
    payload = fixture_json("pull_request.opened.payload")
    del payload["pull_request"]["head"]
    response = post_webhook("pull_request", payload)
    assert response.status_code == 400
    assert "pull_request.head" in response.json()["detail"]
    assert not Delivery.objects.exists()
