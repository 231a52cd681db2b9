"""POST /github/webhook: signature first, deduplication, routing, and what gets stored.

These tests run in a transaction, so nothing is enqueued on commit: they see the rows the webhook
writes, not the dispatch itself (tests/relay/github/test_outbox.py plays the worker).
"""

import json

import pytest
import requests

from ootci import levels
from ootci.models import Delivery, Dispatch, PullRequest
from tests.relay.conftest import UPSTREAM, fixture_bytes, fixture_json, sign

pytestmark = pytest.mark.django_db


def test_it_rejects_a_missing_signature(post_webhook, make_backend):
    make_backend()
    response = post_webhook("pull_request", "pull_request.opened.payload", signature="")
    assert response.status_code == 400
    assert response.json() == {"detail": "Missing X-Hub-Signature-256 header."}
    assert not Delivery.objects.exists()
    assert not PullRequest.objects.exists()


def test_it_rejects_a_bad_signature(post_webhook, make_backend):
    make_backend()
    response = post_webhook("pull_request", "pull_request.opened.payload", signature="sha256=" + "0" * 64)
    assert response.status_code == 401
    assert response.json() == {"detail": "Bad signature."}
    assert not Delivery.objects.exists()
    assert not Dispatch.objects.exists()


def test_it_rejects_a_body_signed_with_another_secret(post_webhook):
    body = fixture_bytes("pull_request.opened.payload")
    response = post_webhook("pull_request", "pull_request.opened.payload", signature=sign(body, "not-our-secret"))
    assert response.status_code == 401
    assert not Delivery.objects.exists()


def test_it_rejects_a_signature_when_no_secret_is_configured(post_webhook, settings):
    body = fixture_bytes("pull_request.opened.payload")
    settings.GITHUB_WEBHOOK_SECRET = ""
    response = post_webhook("pull_request", "pull_request.opened.payload", signature=sign(body, ""))
    assert response.status_code == 401


def test_it_checks_the_signature_before_the_body(client, settings):
    response = client.post(
        "/github/webhook", data=b"not json", content_type="application/json", headers={"X-GitHub-Event": "push"}
    )
    assert response.status_code == 400
    assert "Signature" in response.json()["detail"]


def test_it_answers_400_to_a_signed_body_that_is_not_json(client, settings):
    body = b"{not json"
    headers = {"X-GitHub-Event": "push", "X-Hub-Signature-256": sign(body, settings.GITHUB_WEBHOOK_SECRET)}
    response = client.post("/github/webhook", data=body, content_type="application/json", headers=headers)
    assert response.status_code == 400
    assert response.json()["detail"].startswith("The body is not valid JSON (")


def test_it_answers_400_to_a_json_array(post_webhook):
    response = post_webhook("push", [1, 2])
    assert response.status_code == 400
    assert response.json() == {"detail": "The body must be a JSON object."}


def test_it_answers_400_without_a_delivery_id(client, settings, upstream, make_backend):
    make_backend()
    body = fixture_bytes("pull_request.opened.payload")
    headers = {"X-GitHub-Event": "pull_request", "X-Hub-Signature-256": sign(body, settings.GITHUB_WEBHOOK_SECRET)}
    response = client.post("/github/webhook", data=body, content_type="application/json", headers=headers)
    assert response.status_code == 400
    assert "X-GitHub-Delivery" in response.json()["detail"]
    assert not Delivery.objects.exists()


def test_it_answers_405_in_json_to_a_get(client):
    response = client.get("/github/webhook")
    assert response.status_code == 405
    assert response.json() == {"detail": "Only POST is allowed."}


def test_it_accepts_a_pull_request_and_queues_one_dispatch_per_backend(post_webhook, make_backend):
    make_backend("org/a")
    make_backend("org/b", level="L4")
    response = post_webhook("pull_request", "pull_request.opened.payload", delivery_id="d-1")
    assert response.status_code == 202
    assert response.json() == {"ok": True, "delivery_id": "d-1", "dispatches": 2}
    delivery = Delivery.objects.get()
    assert (delivery.delivery_id, delivery.event, delivery.action) == ("d-1", "pull_request", "opened")
    assert delivery.upstream_repo == UPSTREAM
    assert delivery.head_sha == "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
    assert delivery.payload == fixture_json("pull_request.opened.payload")
    assert sorted(d.backend.repo for d in delivery.dispatches.all()) == ["org/a", "org/b"]
    assert set(delivery.dispatches.values_list("status", flat=True)) == {"pending"}
    pr = PullRequest.objects.get()
    assert (pr.number, pr.title, pr.author, pr.state, pr.labels) == (
        2,
        "Update the README with new information.",
        "Codertocat",
        "open",
        ["bug"],
    )
    assert delivery.pull_request == pr


@pytest.mark.parametrize("action", ["opened", "reopened", "synchronize"])
def test_it_dispatches_pull_request_actions(post_webhook, make_backend, action):
    make_backend()
    response = post_webhook("pull_request", f"pull_request.{action}.payload")
    assert response.status_code == 202
    assert Dispatch.objects.filter(delivery__action=action).count() == 1


def test_it_answers_a_redelivery_with_200_and_dispatches_nothing_new(post_webhook, make_backend):
    make_backend()
    post_webhook("pull_request", "pull_request.opened.payload", delivery_id="same-id")
    make_backend("org/new")  # even a backend added since then gets nothing from the redelivery
    response = post_webhook("pull_request", "pull_request.opened.payload", delivery_id="same-id")
    assert response.status_code == 200
    assert response.json() == {"ok": True, "duplicate": True, "delivery_id": "same-id"}
    assert Delivery.objects.count() == 1
    assert Dispatch.objects.count() == 1


def test_closing_a_pull_request_dispatches_and_stops_wanting_check_runs(post_webhook, make_backend):
    make_backend("org/l4", level="L4")
    post_webhook("pull_request", "pull_request.opened.payload")
    assert PullRequest.objects.get().wants_check_runs is True
    response = post_webhook("pull_request", "pull_request.closed.payload")
    assert response.status_code == 202
    assert PullRequest.objects.get().state == PullRequest.State.CLOSED
    assert PullRequest.objects.get().wants_check_runs is False
    assert Dispatch.objects.filter(delivery__action="closed").count() == 1


def test_a_merged_pull_request_is_recorded_as_merged(post_webhook, make_backend):
    payload = fixture_json("pull_request.closed.payload")
    payload["pull_request"]["merged"] = True
    post_webhook("pull_request", payload)
    assert PullRequest.objects.get().state == PullRequest.State.MERGED


@pytest.mark.parametrize("action", ["labeled", "unlabeled"])
def test_label_changes_are_recorded_without_dispatching(post_webhook, make_backend, action):
    make_backend()
    payload = fixture_json(f"pull_request.{action}.payload")
    payload["pull_request"]["labels"] = [{"name": "ciflow/oot/npu"}, {"name": "bug"}]
    response = post_webhook("pull_request", payload, delivery_id=f"label-{action}")
    assert response.status_code == 200
    assert response.json() == {"ok": True, "delivery_id": f"label-{action}", "dispatches": 0}
    assert PullRequest.objects.get().labels == ["ciflow/oot/npu", "bug"]
    assert Delivery.objects.get().action == action
    assert not Dispatch.objects.exists()


def test_an_older_delivery_does_not_roll_back_the_pull_request(post_webhook):
    newer = fixture_json("pull_request.labeled.payload")
    newer["pull_request"]["updated_at"] = "2030-01-01T00:00:00Z"
    newer["pull_request"]["labels"] = [{"name": "ciflow/oot/npu"}]
    post_webhook("pull_request", newer)
    post_webhook("pull_request", "pull_request.opened.payload")  # updated 2019, arriving late
    assert PullRequest.objects.get().labels == ["ciflow/oot/npu"]


def test_two_labels_added_in_the_same_second_are_both_kept(post_webhook):
    # GitHub's updated_at has whole seconds; the second label's delivery may arrive first, and the first label's
    # payload does not know the second: last writer wins would drop it, and with it an L3 backend's check runs.
    def labeled(name: str, labels: list[str], delivery_id: str):
        payload = fixture_json("pull_request.labeled.payload")
        payload["pull_request"]["updated_at"] = "2030-01-01T00:00:00Z"
        payload["label"] = {"name": name}
        payload["pull_request"]["labels"] = [{"name": n} for n in labels]
        assert post_webhook("pull_request", payload, delivery_id=delivery_id).status_code == 200

    labeled("ciflow/oot/xpu", ["ciflow/oot/npu", "ciflow/oot/xpu"], "second")
    labeled("ciflow/oot/npu", ["ciflow/oot/npu"], "first, arriving late")
    assert sorted(PullRequest.objects.get().labels) == ["ciflow/oot/npu", "ciflow/oot/xpu"]

    unlabeled = fixture_json("pull_request.unlabeled.payload")
    unlabeled["pull_request"]["updated_at"] = "2030-01-01T00:00:00Z"
    unlabeled["label"] = {"name": "ciflow/oot/npu"}
    unlabeled["pull_request"]["labels"] = [{"name": "ciflow/oot/npu"}, {"name": "ciflow/oot/xpu"}]  # a stale list
    post_webhook("pull_request", unlabeled, delivery_id="removed in that second too")
    assert PullRequest.objects.get().labels == ["ciflow/oot/xpu"]


def test_check_runs_are_wanted_by_level_and_label(post_webhook, make_backend):
    make_backend("org/l2", level="L2")
    make_backend("org/l3-labelled", level="L3", device="npu")
    make_backend("org/l3-other", level="L3", device="xpu")
    make_backend("org/l4", level="L4")
    payload = fixture_json("pull_request.synchronize.payload")
    payload["pull_request"]["labels"] = [{"name": "ciflow/oot/npu"}]
    post_webhook("pull_request", payload)
    labels = PullRequest.objects.get().labels
    wanted = {
        d.backend.repo: levels.wants_check_run(d.backend.level, d.backend.device, labels)
        for d in Dispatch.objects.all()
    }
    assert wanted == {"org/l2": False, "org/l3-labelled": True, "org/l3-other": False, "org/l4": True}


def test_a_push_to_the_default_branch_is_dispatched(post_webhook, make_backend):
    make_backend()
    response = post_webhook("push", "push.with-new-branch.payload")
    assert response.status_code == 202
    delivery = Delivery.objects.get()
    assert (delivery.event, delivery.ref, delivery.pull_request) == ("push", "refs/heads/master", None)
    assert delivery.head_sha == fixture_json("push.with-new-branch.payload")["after"]
    assert Dispatch.objects.count() == 1


def test_a_push_of_a_ciflow_tag_is_dispatched(post_webhook, make_backend):
    make_backend()
    payload = fixture_json("push.with-new-branch.payload")
    payload["ref"] = "refs/tags/ciflow/oot/npu/12345"
    assert post_webhook("push", payload).status_code == 202
    assert Dispatch.objects.count() == 1


@pytest.mark.parametrize(
    "change",
    [
        {"ref": "refs/heads/feature"},
        {"ref": "refs/tags/v1.0"},
        {"ref": "refs/tags/ciflow/oot/npu/1", "deleted": True},
    ],
)
def test_other_pushes_are_ignored(post_webhook, make_backend, change):
    make_backend()
    payload = {**fixture_json("push.with-new-branch.payload"), **change}
    response = post_webhook("push", payload)
    assert response.status_code == 200
    assert response.json() == {"ignored": True}
    assert not Delivery.objects.exists()


def test_a_tag_deletion_fixture_is_ignored(post_webhook, make_backend):
    make_backend()
    assert post_webhook("push", "push.payload").json() == {"ignored": True}


@pytest.mark.parametrize(
    ("event", "fixture"),
    [
        ("ping", "ping.payload"),
        ("installation", "installation.created.payload"),
        ("installation_repositories", "installation_repositories.added.payload"),
    ],
)
def test_app_events_are_acknowledged(post_webhook, event, fixture):
    response = post_webhook(event, fixture)
    assert response.status_code == 200
    assert response.json() == {"ok": True, "event": event}
    assert not Delivery.objects.exists()


@pytest.mark.parametrize(
    ("event", "action"), [("pull_request", "assigned"), ("pull_request", "edited"), ("issues", "opened")]
)
def test_other_events_and_actions_are_ignored(post_webhook, make_backend, event, action):
    make_backend()
    payload = {**fixture_json("pull_request.opened.payload"), "action": action}
    response = post_webhook(event, payload)
    assert response.status_code == 200
    assert response.json() == {"ignored": True}
    assert not Delivery.objects.exists()


def test_deliveries_from_another_repository_are_ignored(post_webhook, make_backend):
    make_backend()
    payload = fixture_json("pull_request.opened.payload")
    payload["repository"]["full_name"] = "someone/else"
    response = post_webhook("pull_request", payload)
    assert response.json() == {"ignored": True}
    assert not Delivery.objects.exists()
    assert not PullRequest.objects.exists()


def test_the_upstream_repository_is_compared_ignoring_case(post_webhook, make_backend, settings):
    make_backend()
    settings.UPSTREAM_REPO = UPSTREAM.upper()
    assert post_webhook("pull_request", "pull_request.opened.payload").status_code == 202


def test_disabled_backends_and_backends_without_the_event_get_nothing(post_webhook, make_backend):
    make_backend("org/on")
    make_backend("org/off", enabled=False)
    make_backend("org/push-only", events=["push"])
    make_backend("org/nightly-only", events=["nightly"])
    post_webhook("pull_request", "pull_request.opened.payload")
    assert list(Dispatch.objects.values_list("backend__repo", flat=True)) == ["org/on"]
    post_webhook("push", "push.with-new-branch.payload")
    pushed = Dispatch.objects.filter(delivery__event="push").values_list("backend__repo", flat=True)
    assert sorted(pushed) == ["org/on", "org/push-only"]


def test_a_delivery_without_backends_is_still_stored(post_webhook):
    response = post_webhook("pull_request", "pull_request.opened.payload", delivery_id="lonely")
    assert response.status_code == 200
    assert response.json()["dispatches"] == 0
    assert Delivery.objects.filter(delivery_id="lonely").exists()


def test_a_null_pull_request_body_is_accepted(post_webhook, make_backend):
    make_backend()
    assert post_webhook("pull_request", "pull_request.opened.with-null-body").status_code == 202


@pytest.mark.django_db(transaction=True)
def test_it_answers_over_real_http(live_server, settings, upstream):
    body = fixture_bytes("pull_request.opened.payload")
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": "over-http",
        "X-Hub-Signature-256": sign(body, settings.GITHUB_WEBHOOK_SECRET),
    }
    response = requests.post(f"{live_server.url}/github/webhook", data=body, headers=headers, timeout=10)
    assert response.status_code == 200
    assert json.loads(response.content) == {"ok": True, "delivery_id": "over-http", "dispatches": 0}
    assert Delivery.objects.filter(delivery_id="over-http").exists()
