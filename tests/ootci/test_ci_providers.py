"""The reference relay's ci_providers.yml: import (validated whole, dry run, audited), export, and the round trip."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ootci.models import BuildkitePipeline, IdentityChange

ORG = "018b5ec5-c236-4037-ba08-d8a5d29bcdae"
CI = "018cdabc-d930-49f6-9085-634c4cb582ed"
RELEASE = "018cdabc-0000-49f6-9085-634c4cb58200"
REFERENCE = f"""\
# as the reference deploys it: the constrained form, and the legacy flat section with the same mapping
providers:
  buildkite:
    repo_map:
      {ORG}/{CI}:
        repo: vllm-project/vllm
        required_claims:
          build_branch: [main]
      {ORG}/{RELEASE}: vllm-project/vllm
buildkite:
  {ORG}/{CI}:
    repo: vllm-project/vllm
    required_claims:
      build_branch: [main]
"""


def run(command: str, *args, stdin: str | None = None) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out, stderr=StringIO(), **({"stdin": StringIO(stdin)} if stdin else {}))
    return out.getvalue()


@pytest.fixture
def vllm(make_backend):
    return make_backend(repo="vllm-project/vllm", level="L2")


def test_it_imports_the_references_file_with_an_audit_row_per_mapping(vllm):
    out = run("import_ci_providers", "-", "--reason", "onboarding vLLM", stdin=REFERENCE)

    assert "Applied: 2 to add, 0 to change, 0 to remove." in out
    ci = BuildkitePipeline.objects.get(pipeline_id=CI)
    assert (ci.backend, str(ci.organization_id), ci.required_claims) == (vllm, ORG, {"build_branch": ["main"]})
    assert BuildkitePipeline.objects.get(pipeline_id=RELEASE).required_claims == {}
    audit = IdentityChange.objects.values_list("identity", "action", "actor", "reason", "before")
    assert sorted(audit) == sorted(
        [
            (f"{ORG}/{CI}", "added", "import_ci_providers", "onboarding vLLM", None),
            (f"{ORG}/{RELEASE}", "added", "import_ci_providers", "onboarding vLLM", None),
        ]
    )


def test_a_dry_run_prints_the_changes_and_writes_nothing(vllm):
    out = run("import_ci_providers", "-", "--dry-run", stdin=REFERENCE)

    assert f"+ {ORG}/{CI}: vllm-project/vllm when build_branch in [main]" in out
    assert "Dry run: 2 to add, 0 to change, 0 to remove. Nothing was written." in out
    assert not BuildkitePipeline.objects.exists() and not IdentityChange.objects.exists()


def test_export_then_import_changes_nothing(vllm):
    run("import_ci_providers", "-", stdin=REFERENCE)

    exported = run("export_ci_providers")
    out = run("import_ci_providers", "-", stdin=exported)

    assert "the database already matches" in out
    assert IdentityChange.objects.count() == 2
    assert "repo_map:" in exported and "\nbuildkite:\n" in exported  # both sections, as the reference keeps them
    assert f"{ORG}/{RELEASE}: vllm-project/vllm" in exported and 'build_branch: ["main"]' in exported


def test_a_changed_file_changes_and_removes_mappings_audited(vllm):
    run("import_ci_providers", "-", stdin=REFERENCE)
    changed = f"providers:\n  buildkite:\n    repo_map:\n      {ORG}/{CI}:\n        repo: vllm-project/vllm\n"
    changed += "        required_claims: {build_branch: [main, nightly]}\n"

    out = run("import_ci_providers", "-", stdin=changed)

    assert "Applied: 0 to add, 1 to change, 1 to remove." in out
    assert list(BuildkitePipeline.objects.values_list("required_claims", flat=True)) == [
        {"build_branch": ["main", "nightly"]}
    ]
    latest = {c.action: c for c in IdentityChange.objects.exclude(action="added")}
    assert latest["changed"].before["required_claims"] == {"build_branch": ["main"]}
    assert latest["removed"].identity == f"{ORG}/{RELEASE}" and latest["removed"].after is None


def test_every_problem_is_named_and_nothing_is_written(vllm):
    bad = f"""\
providers:
  buildkite:
    repo_map:
      vllm/ci: vllm-project/vllm
      {ORG}/{CI}:
        repo: vllm-project/vllm
        required_claims: {{build_branch: []}}
      {ORG}/{RELEASE}: someone/unknown
  gitlab:
    repo_map: {{}}
buildkite:
  {ORG}/{RELEASE}: vllm-project/other
"""
    with pytest.raises(CommandError) as refused:
        run("import_ci_providers", "-", stdin=bad)

    message = str(refused.value)
    assert "nothing was changed" in message
    assert "line 4: providers.buildkite.repo_map: 'vllm/ci' is not <organization_id>/<pipeline_id>" in message
    assert "never the slugs" in message
    assert "build_branch: give a list of 1 to 50 accepted values" in message
    assert "line 9: providers.gitlab: only Buildkite pipelines can be mapped here" in message
    assert "is mapped differently on line 8" in message
    assert not BuildkitePipeline.objects.exists()


def test_a_repository_not_in_the_allowlist_is_refused(db):
    with pytest.raises(CommandError, match="vllm-project/vllm is not in the allowlist: import or add the backend"):
        run("import_ci_providers", "-", stdin=REFERENCE)


def test_trust_anchors_in_the_file_are_ignored_with_a_note(vllm, settings):
    older = f"""\
providers:
  github:
    issuer: https://token.actions.githubusercontent.com
    jwks_uri: https://evil.example/jwks
  buildkite:
    issuer: https://evil.example
    jwks_uri: https://evil.example/jwks
    repo_map:
      {ORG}/{CI}: vllm-project/vllm
"""
    out = run("import_ci_providers", "-", stdin=older)

    assert "line 4: providers.github.jwks_uri ignored: issuers and key sets are set in the settings" in out
    assert "providers.buildkite.issuer ignored" in out
    assert BuildkitePipeline.objects.count() == 1
    assert settings.OIDC_BUILDKITE_ISSUER == "https://agent.buildkite.com"
