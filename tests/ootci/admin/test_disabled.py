"""The disabled-test registry in the admin: search and filters, who is recorded, bulk expiry actions, and the
suggestions page whose buttons apply one suggestion each (audited)."""

from datetime import timedelta

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission
from django.utils import timezone

from ootci.models import DisabledTest
from tests.ootci.disabled.test_suggestions import ADD_NAME, RERUN_PASS, disable, job_with

pytestmark = pytest.mark.django_db

LIST = "/admin/ootci/disabledtest/"
SUGGESTIONS = "/admin/ootci/disabledtest/suggestions/"


@pytest.fixture
def npu(make_backend):
    return make_backend("acme/npu", device="npu")


def listed(admin_client, **query) -> list[str]:
    response = admin_client.get(LIST, query)
    assert response.status_code == 200
    return sorted(e.name for e in response.context["cl"].result_list)


def test_entries_are_searched_and_filtered_by_backend_and_expiry(admin_client, npu, make_backend):
    cuda = make_backend("acme/cuda")
    disable(npu, "test_a (__main__.TestA)", reason="hangs the device")
    disable(npu, "test_b (__main__.TestA)", issue_url="https://github.com/acme/npu/issues/77")
    disable(npu, "test_c (__main__.TestA)", expires_at=timezone.now() - timedelta(hours=1))
    disable(cuda, "test_d (__main__.TestA)", expires_at=timezone.now() + timedelta(days=1))

    assert listed(admin_client, q="hangs") == ["test_a (__main__.TestA)"]
    assert listed(admin_client, q="issues/77") == ["test_b (__main__.TestA)"]
    assert listed(admin_client, backend__id__exact=cuda.pk) == ["test_d (__main__.TestA)"]
    assert listed(admin_client, expiry="expired") == ["test_c (__main__.TestA)"]
    assert listed(admin_client, expiry="active") == [f"test_{x} (__main__.TestA)" for x in "abd"]
    assert listed(admin_client, expiry="none") == ["test_a (__main__.TestA)", "test_b (__main__.TestA)"]


def test_an_entry_added_by_hand_records_who_and_its_kind(admin_client, admin_user, npu):
    form = {"backend": npu.pk, "name": "test_mm (__main__.TestLinalg)", "reason": "wrong result", "issue_url": ""}
    response = admin_client.post(f"{LIST}add/", form | {"platforms": "linux, rocm"})

    assert response.status_code == 302, response.context["adminform"].form.errors
    entry = DisabledTest.objects.get()
    assert (entry.user, entry.actor, entry.kind, entry.platforms) == (admin_user, "admin", "pytorch", ["linux", "rocm"])
    assert (entry.test_name, entry.class_name) == ("test_mm", "TestLinalg")


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("name", "test_mm", "neither PyTorch"),
        ("issue_url", "issue 12", "http(s) URL"),
        ("platforms", "a b", "Platform"),
    ],
)
def test_a_bad_entry_is_refused_on_its_field(admin_client, npu, field, value, says):
    form = {"backend": npu.pk, "name": "test_mm (__main__.TestLinalg)", "issue_url": "", "platforms": ""}
    response = admin_client.post(f"{LIST}add/", form | {field: value})

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field] and says in errors[field][0]
    assert not DisabledTest.objects.exists()


def test_bulk_actions_extend_clear_and_expire_and_are_logged(admin_client, npu):
    now = timezone.now()
    none = disable(npu, "test_a (__main__.TestA)")
    soon = disable(npu, "test_b (__main__.TestA)", expires_at=now + timedelta(days=2))

    def act(action, *entries, **more):
        response = admin_client.post(LIST, {"action": action, "_selected_action": [e.pk for e in entries], **more})
        assert response.status_code == 302
        for e in DisabledTest.objects.filter(pk__in=[e.pk for e in entries]):
            next(x for x in entries if x.pk == e.pk).refresh_from_db()

    act("extend_expiry", none, soon)
    assert timedelta(days=29) < none.expires_at - now < timedelta(days=31)
    assert timedelta(days=31) < soon.expires_at - now < timedelta(days=33)
    act("expire_now", soon)
    assert soon.expired and not none.expired
    act("clear_expiry", none)
    assert none.expires_at is None
    messages = sorted(LogEntry.objects.filter(action_flag=CHANGE).values_list("change_message", flat=True))
    assert messages == ["Cleared expiry", "Expired now"] + ["Extended expiry by 30 days"] * 2
    act("delete_selected", none, post="yes")  # confirmed, as on Django's confirmation page
    assert list(DisabledTest.objects.all()) == [soon]


def test_the_suggestions_page_lists_each_kind_and_applies_nothing_by_itself(admin_client, npu):
    for hours in (1, 2, 3):
        job_with(npu, RERUN_PASS, hours=hours)
    disable(npu, "test_old (__main__.TestA)", expires_at=timezone.now() - timedelta(days=1))

    html = admin_client.get(SUGGESTIONS).content.decode()

    assert "Disable candidates (1)" in html and ADD_NAME in html
    assert "Expired (1)" in html and "test_old (__main__.TestA)" in html
    assert DisabledTest.objects.count() == 1
    assert 'href="/admin/ootci/disabledtest/suggestions/"' in admin_client.get(LIST).content.decode()


def test_applying_a_disable_suggestion_adds_the_entry_audited(admin_client, admin_user, npu):
    form = {"apply": "disable", "backend": npu.pk, "name": ADD_NAME, "reason": "Flaky in 3 jobs within 6 hours"}
    response = admin_client.post(f"{SUGGESTIONS}?backend={npu.pk}", form)

    assert response.status_code == 302 and response["Location"] == f"{SUGGESTIONS}?backend={npu.pk}"
    entry = DisabledTest.objects.get()
    assert (entry.name, entry.user, entry.reason) == (ADD_NAME, admin_user, "Flaky in 3 jobs within 6 hours")
    assert LogEntry.objects.get(action_flag=ADDITION).object_repr == ADD_NAME
    admin_client.post(SUGGESTIONS, form)  # twice: told, not duplicated
    assert DisabledTest.objects.count() == 1


def test_re_enabling_removes_the_entry_and_extending_moves_the_expiry(admin_client, npu):
    gone = disable(npu, ADD_NAME)
    old = disable(npu, "test_old (__main__.TestA)", expires_at=timezone.now() - timedelta(days=1))

    admin_client.post(SUGGESTIONS, {"apply": "reenable", "entry": gone.pk})
    admin_client.post(SUGGESTIONS, {"apply": "extend", "entry": old.pk})

    assert list(DisabledTest.objects.all()) == [old]
    old.refresh_from_db()
    assert not old.expired
    assert LogEntry.objects.get(action_flag=DELETION).object_repr == ADD_NAME
    for bad in ("x", "²", "1" * 30):
        assert admin_client.post(SUGGESTIONS, {"apply": "reenable", "entry": bad}).status_code == 404
        assert admin_client.post(SUGGESTIONS, {"apply": "disable", "backend": bad, "name": ADD_NAME}).status_code == 404
        assert admin_client.get(SUGGESTIONS, {"backend": bad}).status_code == 200


def test_the_suggestions_page_is_for_staff_only(client, npu):
    assert client.get(SUGGESTIONS).status_code == 302
    assert client.post(SUGGESTIONS, {"apply": "disable", "backend": npu.pk, "name": ADD_NAME}).status_code == 302
    assert not DisabledTest.objects.exists()


def test_a_viewer_sees_suggestions_but_cannot_apply_them(client, django_user_model, npu):
    viewer = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_disabledtest"))
    client.force_login(viewer)
    entry = disable(npu, ADD_NAME)

    assert client.get(SUGGESTIONS).status_code == 200
    assert client.post(SUGGESTIONS, {"apply": "reenable", "entry": entry.pk}).status_code == 403
    assert client.post(SUGGESTIONS, {"apply": "extend", "entry": entry.pk}).status_code == 403
    disabling = {"apply": "disable", "backend": npu.pk, "name": "t (__main__.T)"}
    assert client.post(SUGGESTIONS, disabling).status_code == 403
    assert list(DisabledTest.objects.all()) == [entry]
