import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from ootci.models import Backend, LevelChange

PAGES = [
    "admin:ootci_backend_changelist",
    "admin:ootci_backend_add",
    "admin:ootci_levelchange_changelist",
    "admin:ootci_jobresult_changelist",
]


@pytest.mark.parametrize("name", PAGES)
def test_pages_render_for_a_superuser(admin_client, make_backend, name):
    make_backend("ascend/pytorch-npu", level="L3", device="npu")
    response = admin_client.get(reverse(name))
    assert response.status_code == 200


@pytest.mark.parametrize("name", PAGES)
def test_pages_refuse_anonymous_users(client, db, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_change_page_shows_the_level_history(admin_client, make_backend):
    backend = make_backend(level="L2")
    backend.change_level("L3", actor="someone", reason="ready for labels")
    Backend.objects.filter(pk=backend.pk).update(device="npu")
    response = admin_client.get(reverse("admin:ootci_backend_change", args=[backend.pk]))
    assert response.status_code == 200
    assert b"ready for labels" in response.content and b"level history" in response.content.lower()


def test_changelist_filters_by_level_and_searches(admin_client, make_backend):
    make_backend("ascend/pytorch-npu", level="L4")
    make_backend("intel/torch-xpu-ops", level="L2")
    response = admin_client.get(reverse("admin:ootci_backend_changelist"), {"level__exact": "L4"})
    assert b"ascend/pytorch-npu" in response.content and b"intel/torch-xpu-ops" not in response.content
    response = admin_client.get(reverse("admin:ootci_backend_changelist"), {"q": "xpu"})
    assert b"intel/torch-xpu-ops" in response.content and b"ascend/pytorch-npu" not in response.content


def test_adding_a_backend_records_who_added_it(admin_client, admin_user, db):
    response = admin_client.post(
        reverse("admin:ootci_backend_add"),
        {
            "repo": " intel/torch-xpu-ops/ ",
            "level": "L2",
            "device": "xpu",
            "oncalls": "@a, b",
            "events": ["pull_request"],
            "enabled": "on",
            "notes": "",
            "reason": "new backend",
            "level_changes-TOTAL_FORMS": "0",
            "level_changes-INITIAL_FORMS": "0",
            "buildkite_pipelines-TOTAL_FORMS": "0",
            "buildkite_pipelines-INITIAL_FORMS": "0",
            "identity_changes-TOTAL_FORMS": "0",
            "identity_changes-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content
    backend = Backend.objects.get()
    assert (backend.repo, backend.oncalls, backend.events) == ("intel/torch-xpu-ops", ["a", "b"], ["pull_request"])
    change = LevelChange.objects.get()
    assert (change.from_level, change.to_level, change.changed_by, change.reason) == (
        "",
        "L2",
        admin_user,
        "new backend",
    )


def test_the_form_explains_that_l3_needs_a_device(admin_client, db):
    response = admin_client.post(
        reverse("admin:ootci_backend_add"),
        {
            "repo": "org/name",
            "level": "L3",
            "device": "",
            "events": ["pull_request"],
            "level_changes-TOTAL_FORMS": "0",
            "level_changes-INITIAL_FORMS": "0",
            "buildkite_pipelines-TOTAL_FORMS": "0",
            "buildkite_pipelines-INITIAL_FORMS": "0",
            "identity_changes-TOTAL_FORMS": "0",
            "identity_changes-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 200
    assert b"An L3 backend needs a device" in response.content
    assert not Backend.objects.exists()


def test_the_form_refuses_a_repo_that_is_not_org_name(admin_client, db):
    response = admin_client.post(
        reverse("admin:ootci_backend_add"),
        {
            "repo": "just-a-name",
            "level": "L1",
            "events": ["push"],
            "level_changes-TOTAL_FORMS": "0",
            "level_changes-INITIAL_FORMS": "0",
            "buildkite_pipelines-TOTAL_FORMS": "0",
            "buildkite_pipelines-INITIAL_FORMS": "0",
            "identity_changes-TOTAL_FORMS": "0",
            "identity_changes-INITIAL_FORMS": "0",
        },
    )
    assert b"Enter a repository as org/name" in response.content
    assert not Backend.objects.exists()


def test_editing_the_level_writes_a_level_change(admin_client, admin_user, make_backend):
    backend = make_backend(level="L2", device="npu")
    response = admin_client.post(
        reverse("admin:ootci_backend_change", args=[backend.pk]),
        {
            "repo": backend.repo,
            "level": "L3",
            "device": "npu",
            "oncalls": "",
            "events": ["pull_request", "push"],
            "enabled": "on",
            "reason": "stable",
            "level_changes-TOTAL_FORMS": "0",
            "level_changes-INITIAL_FORMS": "0",
            "buildkite_pipelines-TOTAL_FORMS": "0",
            "buildkite_pipelines-INITIAL_FORMS": "0",
            "identity_changes-TOTAL_FORMS": "0",
            "identity_changes-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content
    change = LevelChange.objects.get()
    assert (change.from_level, change.to_level, change.changed_by, change.reason) == ("L2", "L3", admin_user, "stable")


def act(client, action: str, backends, **extra):
    data = {"action": action, ACTION_CHECKBOX_NAME: [b.pk for b in backends], **extra}
    return client.post(reverse("admin:ootci_backend_changelist"), data, follow=True)


def test_promote_asks_for_a_reason_first(admin_client, make_backend):
    backend = make_backend(level="L2", device="npu")
    response = act(admin_client, "promote", [backend])
    assert b"L2 &rarr; L3" in response.content or "L2 → L3".encode() in response.content
    backend.refresh_from_db()
    assert backend.level == "L2" and not LevelChange.objects.exists()


def test_promote_moves_one_level_and_audits_it(admin_client, admin_user, make_backend):
    backend = make_backend(level="L2", device="npu")
    response = act(admin_client, "promote", [backend], apply="Promote", reason="weekly success 97%")
    assert b"Promoted 1 backend" in response.content
    backend.refresh_from_db()
    assert backend.level == "L3"
    change = LevelChange.objects.get()
    assert (change.from_level, change.to_level, change.changed_by, change.reason) == (
        "L2",
        "L3",
        admin_user,
        "weekly success 97%",
    )


def test_demote_moves_one_level_and_skips_the_bottom(admin_client, make_backend):
    top = make_backend("a/top", level="L4", device="npu")
    bottom = make_backend("a/bottom", level="L1")
    response = act(admin_client, "demote", [top, bottom], apply="Demote", reason="red for a week")
    assert b"Demoted 1 backend" in response.content and b"a/bottom" in response.content
    assert list(Backend.objects.order_by("repo").values_list("level", flat=True)) == ["L1", "L3"]
    assert LevelChange.objects.get().backend == top


def test_promoting_to_l3_without_a_device_is_refused(admin_client, make_backend):
    backend = make_backend(level="L2", device="")
    act(admin_client, "promote", [backend], apply="Promote", reason="x")
    backend.refresh_from_db()
    assert backend.level == "L2" and not LevelChange.objects.exists()


def test_a_backend_is_marked_the_relays_probe_in_the_admin(admin_client, db):
    response = admin_client.post(
        reverse("admin:ootci_backend_add"),
        {
            "repo": "pytorch/crcr-test",
            "level": "L2",
            "events": ["pull_request", "nightly"],
            "enabled": "on",
            "probe": "on",
            "reason": "the relay's probe",
            "level_changes-TOTAL_FORMS": "0",
            "level_changes-INITIAL_FORMS": "0",
            "buildkite_pipelines-TOTAL_FORMS": "0",
            "buildkite_pipelines-INITIAL_FORMS": "0",
            "identity_changes-TOTAL_FORMS": "0",
            "identity_changes-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content
    assert Backend.objects.get().probe is True
    listed = admin_client.get(reverse("admin:ootci_backend_changelist"), {"probe__exact": "1"})
    assert b"pytorch/crcr-test" in listed.content
