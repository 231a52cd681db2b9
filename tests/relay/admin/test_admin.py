"""The relay's admin pages: deliveries and dispatches, browsable and filterable, and "redispatch"."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ootci.models import CallbackRejection, Delivery, Dispatch
from tests.relay.conftest import UPSTREAM, fixture_json


def make_dispatch(backend, *, delivery_id: str, status: str = "pending", **fields) -> Dispatch:
    payload = fixture_json("pull_request.opened.payload")
    delivery, _ = Delivery.objects.get_or_create(
        delivery_id=delivery_id,
        defaults={"event": "pull_request", "action": "opened", "upstream_repo": UPSTREAM, "payload": payload},
    )
    return Dispatch.objects.create(delivery=delivery, backend=backend, status=status, **fields)


@pytest.mark.django_db
def test_failed_dispatches_are_listed_with_their_reason(admin_client, make_backend):
    make_dispatch(make_backend("org/a"), delivery_id="d-1", status="failed", last_error="GitHub 422 on POST: no")
    make_dispatch(make_backend("org/b"), delivery_id="d-1", status="sent")
    response = admin_client.get("/admin/ootci/dispatch/", {"status__exact": "failed"})
    assert response.status_code == 200
    text = response.content.decode()
    assert "org/a" in text and "GitHub 422 on POST: no" in text
    assert [d.backend.repo for d in response.context["cl"].result_list] == ["org/a"]


@pytest.mark.django_db
def test_lost_dispatches_are_listed_as_the_hud_counts_them(admin_client, make_backend):
    old = timezone.now() - timedelta(days=1)
    make_dispatch(make_backend("org/lost", level="L2"), delivery_id="d-2", status="sent", created_at=old)
    make_dispatch(make_backend("org/l1", level="L1"), delivery_id="d-2", status="sent", created_at=old)
    make_dispatch(make_backend("org/recent", level="L2"), delivery_id="d-3", status="sent")
    response = admin_client.get("/admin/ootci/dispatch/", {"lost": "1"})
    assert response.status_code == 200
    assert [d.backend.repo for d in response.context["cl"].result_list] == ["org/lost"]


@pytest.mark.django_db
def test_dispatches_waiting_for_a_retry_are_listed(admin_client, make_backend):
    later = timezone.now() + timedelta(minutes=10)
    make_dispatch(make_backend("org/wait"), delivery_id="d-4", retry_at=later, last_error="GitHub 502 on POST: x")
    make_dispatch(make_backend("org/fresh"), delivery_id="d-4")
    response = admin_client.get("/admin/ootci/dispatch/", {"waiting": "1"})
    assert response.status_code == 200
    assert [d.backend.repo for d in response.context["cl"].result_list] == ["org/wait"]


@pytest.mark.django_db
def test_rejected_callbacks_are_listed(admin_client):
    CallbackRejection.objects.create(repo="org/x", status_code=403, detail="org/x is not in the OOT CI allowlist.")
    response = admin_client.get("/admin/ootci/callbackrejection/")
    assert response.status_code == 200
    assert "org/x is not in the OOT CI allowlist." in response.content.decode()


@pytest.mark.django_db
def test_deliveries_are_listed_with_their_dispatch_counts(admin_client, make_backend):
    make_dispatch(make_backend("org/a"), delivery_id="d-9", status="failed")
    response = admin_client.get("/admin/ootci/delivery/")
    assert response.status_code == 200
    assert "d-9" in response.content.decode()
    detail = admin_client.get(f"/admin/ootci/delivery/{Delivery.objects.get().pk}/change/")
    assert detail.status_code == 200
    assert "org/a" in detail.content.decode()


@pytest.mark.django_db(transaction=True)
def test_redispatch_sends_failed_dispatches_again(admin_client, make_backend, fake_github):
    failed = make_dispatch(make_backend("org/a"), delivery_id="d-1", status="failed", attempts=5, last_error="500")
    sent = make_dispatch(make_backend("org/b"), delivery_id="d-1", status="sent", attempts=1)
    response = admin_client.post(
        "/admin/ootci/dispatch/",
        {"action": "redispatch", "_selected_action": [failed.pk, sent.pk]},
        follow=True,
    )
    assert response.status_code == 200
    assert "1 dispatch(es) queued again" in response.content.decode()
    failed.refresh_from_db()
    assert (failed.status, failed.attempts) == ("sent", 1)
    assert [r.path for r in fake_github.dispatches()] == ["/repos/org/a/dispatches"]
