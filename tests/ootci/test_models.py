import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError

from ootci.models import Backend, LevelChange


def test_repo_is_unique_ignoring_case(make_backend):
    make_backend("Ascend/PyTorch-NPU")
    with pytest.raises(IntegrityError):
        make_backend("ascend/pytorch-npu")


def test_clean_names_the_clashing_repo(make_backend):
    make_backend("Ascend/PyTorch-NPU")
    with pytest.raises(ValidationError) as exc:
        Backend(repo="ascend/pytorch-npu", level="L2").full_clean()
    assert "Ascend/PyTorch-NPU is already in the allowlist" in str(exc.value)


def test_it_rejects_a_repo_without_org(db):
    with pytest.raises(ValidationError) as exc:
        Backend(repo="pytorch-npu", level="L2").full_clean()
    assert "org/name" in str(exc.value)


@pytest.mark.parametrize("repo", ["tests/npu", "PR/xpu"])
def test_it_rejects_an_org_whose_hud_pages_are_the_huds_own(db, repo):
    with pytest.raises(ValidationError) as exc:
        Backend(repo=repo, level="L2").full_clean()
    assert (
        f"a backend of the organisation “{repo.split('/')[0]}” could not be shown" in exc.value.message_dict["repo"][0]
    )


def test_l3_needs_a_device(db):
    with pytest.raises(ValidationError) as exc:
        Backend(repo="a/b", level="L3").full_clean()
    assert "needs a device" in exc.value.message_dict["device"][0]


def test_device_must_be_a_slug(db):
    with pytest.raises(ValidationError) as exc:
        Backend(repo="a/b", level="L3", device="n p u").full_clean()
    assert "device" in exc.value.message_dict


def test_events_must_be_known(db):
    with pytest.raises(ValidationError) as exc:
        Backend(repo="a/b", level="L2", events=["pull_request", "release"]).full_clean()
    assert "release" in exc.value.message_dict["events"][0]


def test_the_database_refuses_an_unknown_level(db):
    with pytest.raises(IntegrityError):
        Backend.objects.create(repo="a/b", level="L5")


def test_change_level_writes_an_audit_row(make_backend, django_user_model):
    user = django_user_model.objects.create(username="maint")
    backend = make_backend(level="L2")
    change = backend.change_level("L4", user=user, reason="green for a month")
    backend.refresh_from_db()
    assert backend.level == "L4"
    assert (change.from_level, change.to_level, change.changed_by, change.actor) == ("L2", "L4", user, "maint")
    assert change.reason == "green for a month"


def test_change_level_to_the_same_level_writes_nothing(make_backend):
    backend = make_backend(level="L2")
    assert backend.change_level("L2", actor="x") is None
    assert LevelChange.objects.count() == 0


def test_check_run_prefix_is_the_device_else_the_repo_name(make_backend):
    assert make_backend("a/with-device", level="L4", device="npu").check_run_prefix == "npu"
    assert make_backend("a/no-device", level="L4").check_run_prefix == "no-device"
