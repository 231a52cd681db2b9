"""Level governance through the admin and the readiness schedule: reviews on every path that changes a level,
proposals that are never applied, temporary downgrades that restore themselves, evidence for the allowlist PR."""

from datetime import timedelta

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import LogEntry
from django.urls import reverse
from django.utils import timezone

from ootci import governance
from ootci.models import Backend, LevelChange, LevelReview, TemporaryDowngrade, allowlisted_level
from tests.hud.builders import ago, job

pytestmark = pytest.mark.django_db


def passing(backend, n: int = 3, **fields) -> None:
    for i in range(n):
        fields_ = {"queue_time": 60.0} | fields
        job(backend, name=f"j{i}", event_type="pull_request", pr_number=i + 1, head_sha=f"{i:040d}", **fields_)


def failing(backend) -> None:
    job(backend, name="t", conclusion="timed_out", event_type="pull_request", pr_number=99, head_sha="9" * 40)


def change_form(client, backend, **changes):
    data = {
        "repo": backend.repo,
        "level": backend.level,
        "device": backend.device,
        "oncalls": "",
        "events": ["pull_request", "push"],
        "enabled": "on",
        "level_changes-TOTAL_FORMS": "0",
        "level_changes-INITIAL_FORMS": "0",
        "buildkite_pipelines-TOTAL_FORMS": "0",
        "buildkite_pipelines-INITIAL_FORMS": "0",
        "identity_changes-TOTAL_FORMS": "0",
        "identity_changes-INITIAL_FORMS": "0",
    }
    return client.post(reverse("admin:ootci_backend_change", args=[backend.pk]), data | changes)


def act(client, action: str, backends, **extra):
    data = {"action": action, ACTION_CHECKBOX_NAME: [b.pk for b in backends], **extra}
    return client.post(reverse("admin:ootci_backend_changelist"), data, follow=True)


def test_the_change_form_refuses_a_level_change_without_a_reason(admin_client, make_backend):
    backend = make_backend("a/npu", "L2", device="npu")

    response = change_form(admin_client, backend, level="L3")

    assert b"A level change needs a reason." in response.content
    assert Backend.objects.get().level == "L2" and not LevelReview.objects.exists()


def test_the_change_form_asks_to_confirm_a_jump_of_two_levels(admin_client, make_backend):
    backend = make_backend("a/npu", "L2", device="npu")

    refused = change_form(admin_client, backend, level="L4", reason="skip")
    assert "L2 → L4 skips a level: confirm it to go ahead." in refused.content.decode()
    assert Backend.objects.get().level == "L2"

    response = change_form(admin_client, backend, level="L4", reason="skip", confirm_jump="on")
    assert response.status_code == 302
    review = LevelReview.objects.get()
    assert (review.kind, review.state, review.from_level, review.to_level, review.reason) == (
        "change",
        "applied",
        "L2",
        "L4",
        "skip",
    )
    assert review.level_change == LevelChange.objects.get()


def test_the_review_keeps_the_figures_as_evaluated(admin_client, admin_user, make_backend):
    backend = make_backend("a/npu", "L2", device="npu")
    passing(backend)

    change_form(admin_client, backend, level="L3", reason="ready")

    review = LevelReview.objects.get()
    assert (review.verdict, review.verdict_text, review.reviewer) == ("eligible", "eligible for L3", admin_user)
    assert (review.promotion_days, review.demotion_days) == (14, 7)
    assert review.figures["promotion"]["total"] == 3
    assert review.figures["promotion_gates"][0]["value"] == 1.0  # average queue time, minutes


def test_the_promote_confirmation_shows_readiness_and_refuses_l3_without_device_up_front(admin_client, make_backend):
    ready = make_backend("a/ready", "L2", device="npu")
    nodevice = make_backend("a/nodevice", "L2", device="")
    passing(ready)

    page = act(admin_client, "promote", [ready, nodevice]).content.decode()

    assert "eligible for L3" in page and "average queue time" in page
    assert "refused: an L3 backend needs a device" in page
    only = act(admin_client, "promote", [nodevice]).content.decode()
    assert "None of these backends can promote." in only and 'name="apply"' not in only


def test_promote_writes_a_review_and_an_entry_in_the_history(admin_client, make_backend):
    backend = make_backend("a/npu", "L2", device="npu")

    act(admin_client, "promote", [backend], apply="Promote", reason="two weeks green")

    backend.refresh_from_db()
    assert backend.level == "L3"
    assert LevelReview.objects.get().reason == "two weeks green"
    entry = LogEntry.objects.get()
    assert (entry.object_id, entry.change_message) == (str(backend.pk), "Promoted to L3: two weeks green")


def test_the_backend_list_shows_and_filters_by_readiness(admin_client, make_backend):
    ready = make_backend("a/ready", "L2", device="npu")
    make_backend("a/idle", "L2")
    passing(ready)

    page = admin_client.get(reverse("admin:ootci_backend_changelist")).content.decode()
    assert "eligible for L3" in page and "View on HUD" in page
    filtered = admin_client.get(reverse("admin:ootci_backend_changelist") + "?readiness=eligible").content.decode()
    assert "a/ready" in filtered and "a/idle" not in filtered


def test_the_change_page_shows_readiness_and_hud_links(admin_client, make_backend):
    backend = make_backend("a/npu", "L3")
    failing(backend)

    page = admin_client.get(reverse("admin:ootci_backend_change", args=[backend.pk])).content.decode()

    assert "at risk: 1 gate failing since" in page and "/oot/a/npu/readiness/" in page


def test_the_schedule_proposes_once_and_never_applies(make_backend):
    backend = make_backend("a/npu", "L2", device="npu")
    passing(backend)

    assert governance.readiness_review()["proposals"] == 1
    assert governance.readiness_review()["proposals"] == 0

    proposal = LevelReview.objects.get()
    assert (proposal.kind, proposal.state, proposal.to_level, proposal.actor) == (
        "proposal",
        "proposed",
        "L3",
        "readiness schedule",
    )
    backend.refresh_from_db()
    assert backend.level == "L2" and not LevelChange.objects.exists()


def test_the_schedule_gives_notice_then_proposes_a_due_demotion(make_backend):
    backend = make_backend("a/npu", "L3")
    failing(backend)
    now = timezone.now()

    governance.readiness_review(now=now)
    assert backend.gate_notice.failing_since == now and not LevelReview.objects.exists()  # at risk: a notice only

    governance.readiness_review(now=now + timedelta(days=5))  # two working days passed, whatever the weekday
    proposal = LevelReview.objects.get()
    assert (proposal.kind, proposal.to_level, proposal.verdict) == ("proposal", "L2", "below")
    assert Backend.objects.get().level == "L3"


def test_a_temporary_downgrade_restores_itself_at_its_date(make_backend, admin_user):
    backend = make_backend("a/npu", "L4", device="npu")
    until = timezone.now() + timedelta(days=3)

    governance.downgrade_start(backend=backend, to="L2", reason="flaky runners", until=until, user=admin_user)
    assert Backend.objects.get().level == "L2"
    governance.readiness_review(now=until - timedelta(minutes=1))
    assert Backend.objects.get().level == "L2"
    governance.readiness_review(now=until)

    backend.refresh_from_db()
    assert backend.level == "L4"
    assert TemporaryDowngrade.objects.get().ended_at == until
    steps = list(LevelChange.objects.order_by("changed_at").values_list("from_level", "to_level", "actor"))
    assert steps == [("L4", "L2", admin_user.username), ("L2", "L4", "readiness schedule")]
    assert sorted(LevelReview.objects.values_list("kind", flat=True)) == ["downgrade", "restore"]


def test_a_temporary_downgrade_restores_itself_after_n_days_of_passing_gates(make_backend):
    backend = make_backend("a/npu", "L3")
    governance.downgrade_start(backend=backend, to="L2", reason="queue backlog", recover_days=2)
    passing(backend)
    now = timezone.now()

    governance.readiness_review(now=now)  # passing since now
    governance.readiness_review(now=now + timedelta(days=1))
    assert Backend.objects.get().level == "L2"
    governance.readiness_review(now=now + timedelta(days=2))

    assert Backend.objects.get().level == "L3"


def test_a_temporary_downgrade_needs_an_end_and_a_lower_level(make_backend):
    backend = make_backend("a/npu", "L3")
    with pytest.raises(ValueError, match="needs an end"):
        governance.downgrade_start(backend=backend, to="L2", reason="x")
    with pytest.raises(ValueError, match="is not one"):
        governance.downgrade_start(backend=backend, to="L4", reason="x", recover_days=1)
    assert Backend.objects.get().level == "L3"


def test_the_admin_starts_a_temporary_downgrade(admin_client, make_backend):
    backend = make_backend("a/npu", "L4", device="npu")

    response = admin_client.post(
        reverse("admin:ootci_temporarydowngrade_add"),
        {"backend": backend.pk, "effective": "L3", "recover_days": "3", "reason": "red week"},
    )

    assert response.status_code == 302, response.content
    assert Backend.objects.get().level == "L3"
    assert allowlisted_level(Backend.objects.get()) == "L4"


def test_the_evidence_has_the_figures_and_the_allowlist_diff(admin_client, make_backend):
    backend = make_backend("a/npu", "L2", device="npu", oncalls=["alice"])
    passing(backend)
    governance.level_change_reviewed(backend=backend, to="L3", reason="ready")

    review = LevelReview.objects.get()
    response = admin_client.post(
        reverse("admin:ootci_levelreview_changelist"), {"action": "evidence", ACTION_CHECKBOX_NAME: [review.pk]}
    )

    text = response.content.decode()
    assert response["Content-Type"].startswith("text/markdown")
    assert "## a/npu: L2 → L3" in text
    assert "| average queue time | 14 d | 1 min | < 30 min | pass |" in text
    assert "-  - a/npu: alice" in text and "+  npu:" in text and "+    a/npu: [alice]" in text


def test_old_figures_do_not_count(make_backend):
    backend = make_backend("a/npu", "L2", device="npu")
    job(backend, name="old", event_type="pull_request", pr_number=1, head_sha="1" * 40, finished=ago(days=15))

    assert governance.readiness_now([backend])[backend.pk].verdict == "no-data"


@pytest.mark.parametrize(
    "name",
    [
        "admin:ootci_levelreview_changelist",
        "admin:ootci_temporarydowngrade_add",
        "admin:ootci_gatenotice_changelist",
        "admin:ootci_alertrule_changelist",
        "admin:ootci_notificationchannel_add",
        "admin:ootci_incident_changelist",
        "admin:ootci_notification_changelist",
    ],
)
def test_the_governance_and_alert_pages_render(admin_client, name):
    assert admin_client.get(reverse(name)).status_code == 200


def test_audit_records_cannot_be_changed_in_the_admin(admin_client, make_backend):
    backend = make_backend("a/npu", "L2", device="npu")
    governance.level_change_reviewed(backend=backend, to="L3", reason="ready")

    assert admin_client.get(reverse("admin:ootci_levelreview_add")).status_code == 403
    review = LevelReview.objects.get()
    assert (
        admin_client.post(reverse("admin:ootci_levelreview_delete", args=[review.pk]), {"post": "yes"}).status_code
        == 403
    )
