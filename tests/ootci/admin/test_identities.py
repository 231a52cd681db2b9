"""A backend's Buildkite pipelines in the admin: edited on the backend's page or in their own list, every change audited
(IdentityChange, shown on the backend's page), bad values refused with a reason."""

import uuid

import pytest
from django.urls import reverse

from ootci.models import BuildkitePipeline, IdentityChange

ORG, PIPELINE = str(uuid.uuid4()), str(uuid.uuid4())


def backend_form(backend, pipelines: list[dict], *, initial: int = 0, reason: str = "") -> dict:
    form = {"repo": backend.repo, "level": backend.level, "device": backend.device, "oncalls": "", "notes": ""}
    form |= {"events": backend.events, "enabled": "on", "exonerate": "unknown", "reason": reason}
    form |= {"nightly_cadence_minutes": "1440", "stale_grace_minutes": "120"}
    for prefix in ("level_changes", "identity_changes"):
        form |= {f"{prefix}-TOTAL_FORMS": "0", f"{prefix}-INITIAL_FORMS": "0"}
    form |= {"buildkite_pipelines-TOTAL_FORMS": str(len(pipelines)), "buildkite_pipelines-INITIAL_FORMS": str(initial)}
    for i, pipeline in enumerate(pipelines):
        form |= {f"buildkite_pipelines-{i}-{field}": value for field, value in pipeline.items()}
    return form


@pytest.mark.parametrize(
    "name",
    [
        "admin:ootci_buildkitepipeline_changelist",
        "admin:ootci_buildkitepipeline_add",
        "admin:ootci_identitychange_changelist",
    ],
)
def test_pages_render_for_a_superuser(admin_client, make_backend, name):
    BuildkitePipeline.objects.create(backend=make_backend(), organization_id=ORG, pipeline_id=PIPELINE)

    assert admin_client.get(reverse(name)).status_code == 200


def test_pipelines_added_changed_and_removed_on_the_backend_page_are_audited(admin_client, admin_user, make_backend):
    backend = make_backend(repo="vllm-project/vllm")
    url = reverse("admin:ootci_backend_change", args=[backend.pk])
    mapping = {"organization_id": ORG, "pipeline_id": PIPELINE, "required_claims": '{"build_branch": ["main"]}'}

    added = admin_client.post(url, backend_form(backend, [mapping], reason="vLLM CI on Buildkite"))
    pipeline = BuildkitePipeline.objects.get()
    edited = {"id": str(pipeline.pk), "backend": str(backend.pk), **mapping, "required_claims": "{}"}
    changed = admin_client.post(url, backend_form(backend, [edited], initial=1))
    removed = admin_client.post(url, backend_form(backend, [edited | {"DELETE": "on"}], initial=1, reason="moved"))

    assert [r.status_code for r in (added, changed, removed)] == [302, 302, 302]
    assert not BuildkitePipeline.objects.exists()
    history = IdentityChange.objects.order_by("changed_at")
    assert [(c.action, c.changed_by, c.reason) for c in history] == [
        ("added", admin_user, "vLLM CI on Buildkite"),
        ("changed", admin_user, ""),
        ("removed", admin_user, "moved"),
    ]
    assert history[1].summary == "vllm-project/vllm when build_branch in main → vllm-project/vllm"
    page = admin_client.get(url).content.decode()
    assert "CI identity history" in page and f"{ORG}/{PIPELINE}" in page


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"organization_id": "vllm"}, "Enter a valid UUID"),
        ({"required_claims": '{"build_branch": "main"}'}, "build_branch: give a list of 1 to 50 accepted values"),
        ({"required_claims": '["main"]'}, "Required claims must be a mapping"),
        ({"required_claims": '{"build branch": ["main"]}'}, "is not a claim name"),
    ],
)
def test_bad_mappings_are_refused_with_a_reason(admin_client, make_backend, changes, reason):
    backend = make_backend()
    mapping = {"organization_id": ORG, "pipeline_id": PIPELINE, "required_claims": "{}"} | changes

    response = admin_client.post(
        reverse("admin:ootci_backend_change", args=[backend.pk]), backend_form(backend, [mapping])
    )

    assert response.status_code == 200
    assert reason in response.content.decode()
    assert not BuildkitePipeline.objects.exists() and not IdentityChange.objects.exists()


def test_a_pipeline_reports_as_one_backend_only(admin_client, make_backend):
    BuildkitePipeline.objects.create(backend=make_backend("org/first"), organization_id=ORG, pipeline_id=PIPELINE)
    second = make_backend("org/second")
    mapping = {"organization_id": ORG, "pipeline_id": PIPELINE, "required_claims": "{}"}

    response = admin_client.post(
        reverse("admin:ootci_backend_change", args=[second.pk]), backend_form(second, [mapping])
    )

    assert response.status_code == 200
    assert "This pipeline is already mapped to a backend" in response.content.decode()


def test_the_pipeline_list_edits_are_audited_too(admin_client, admin_user, make_backend):
    backend = make_backend()
    data = {"backend": backend.pk, "organization_id": ORG, "pipeline_id": PIPELINE, "required_claims": "{}"}

    response = admin_client.post(reverse("admin:ootci_buildkitepipeline_add"), data)
    pipeline = BuildkitePipeline.objects.get()
    deleted = admin_client.post(reverse("admin:ootci_buildkitepipeline_delete", args=[pipeline.pk]), {"post": "yes"})

    assert (response.status_code, deleted.status_code) == (302, 302)
    assert list(IdentityChange.objects.order_by("changed_at").values_list("action", "changed_by")) == [
        ("added", admin_user.pk),
        ("removed", admin_user.pk),
    ]
