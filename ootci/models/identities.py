"""Who a CI token speaks for, when its issuer names no repository: Buildkite pipelines mapped to backends, and the
audit trail of every change to that map (``ootci.identities`` edits both; the relay reads the map).

Issuers and their key sets are trust anchors and live in the settings only; the database holds identities: which
pipeline (by the immutable organization and pipeline UUIDs, never slugs, which can be renamed and re-claimed) reports
as which backend, and which claims its tokens must carry (``{"build_branch": ["main"]}``, so that a fork build of the
same pipeline cannot report as the backend).
"""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

# The claims a Buildkite token may be required to carry are named like Buildkite's own (build_branch, step_key).
CLAIM_NAME_MAX = 64
CLAIM_VALUE_MAX = 255
CLAIM_VALUES_MAX = 50


def required_claims_problem(value: object) -> str:
    """Why ``value`` is not a required-claims mapping (claim name → non-empty list of accepted texts); "" if it is."""
    if not isinstance(value, dict):
        return 'Required claims must be a mapping of claim → list of accepted values, e.g. {"build_branch": ["main"]}.'
    for name, accepted in value.items():
        if not (isinstance(name, str) and name.isascii() and name.isidentifier() and len(name) <= CLAIM_NAME_MAX):
            return f"{name!r} is not a claim name (letters, digits and _, at most {CLAIM_NAME_MAX} characters)."
        if not isinstance(accepted, list) or not accepted or len(accepted) > CLAIM_VALUES_MAX:
            return f"{name}: give a list of 1 to {CLAIM_VALUES_MAX} accepted values, e.g. [main]."
        for text in accepted:
            if not isinstance(text, str) or not text or len(text) > CLAIM_VALUE_MAX or "\x00" in text:
                return f"{name}: {text!r} is not a value a token can carry (text of 1 to {CLAIM_VALUE_MAX} characters)."
    return ""


def claims_unmet(required: dict[str, list[str]], claims: dict) -> str:
    """Which of ``required`` a verified token's ``claims`` do not meet, said for its sender ("" when all are met).

    A claim is met when the token carries it as text (or a whole number: Buildkite's build_number) equal to one of
    the accepted values; an absent claim is not met."""
    unmet = []
    for name, accepted in (required or {}).items():
        value = claims.get(name)
        text = str(value) if isinstance(value, str | int) and not isinstance(value, bool) else None
        if text not in accepted:
            carried = "does not carry it" if name not in claims else f"has {value!r}"
            unmet.append(f"{name} must be {_one_of(accepted)} (this token {carried})")
    return "; ".join(unmet)


def _one_of(values: list[str]) -> str:
    return repr(values[0]) if len(values) == 1 else "one of " + ", ".join(repr(v) for v in values)


class BuildkitePipeline(models.Model):
    """A Buildkite pipeline whose OIDC tokens report as ``backend`` (Buildkite tokens carry no repository claim)."""

    backend = models.ForeignKey("ootci.Backend", on_delete=models.CASCADE, related_name="buildkite_pipelines")
    organization_id = models.UUIDField(help_text="The token's organization_id claim (a UUID, never the slug)")
    pipeline_id = models.UUIDField(help_text="The token's pipeline_id claim (a UUID, never the slug)")
    required_claims = models.JSONField(
        default=dict,
        blank=True,
        help_text='Claims a token must carry, each with its accepted values, e.g. {"build_branch": ["main"]}: '
        "a build of a fork branch of the same pipeline is then refused. Empty: any build of the pipeline.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["backend__repo", "organization_id", "pipeline_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization_id", "pipeline_id"],
                name="buildkite_pipeline_unique",
                violation_error_message="This pipeline is already mapped to a backend: a pipeline reports as one.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} → {self.backend.repo}" if self.backend_id else self.key

    @property
    def key(self) -> str:
        """``<organization_id>/<pipeline_id>``, as the reference's ``ci_providers.yml`` names it."""
        return f"{self.organization_id}/{self.pipeline_id}"

    def as_recorded(self) -> dict:
        """What the audit trail keeps of the mapping."""
        return {"repo": self.backend.repo, "required_claims": self.required_claims or {}}

    def clean(self) -> None:
        if self.required_claims is None:
            self.required_claims = {}
        if problem := required_claims_problem(self.required_claims):
            raise ValidationError({"required_claims": problem})


class IdentityChange(models.Model):
    """Audit row for every change to a backend's CI identities (a pipeline mapped, re-constrained or unmapped)."""

    class Action(models.TextChoices):
        ADDED = "added"
        CHANGED = "changed"
        REMOVED = "removed"

    backend = models.ForeignKey("ootci.Backend", on_delete=models.CASCADE, related_name="identity_changes")
    provider = models.CharField(max_length=20, default="buildkite")
    identity = models.CharField(max_length=100, help_text="<organization_id>/<pipeline_id>")
    action = models.CharField(max_length=10, choices=Action.choices)
    before = models.JSONField(null=True, blank=True, help_text="repo and required claims before (null when added)")
    after = models.JSONField(null=True, blank=True, help_text="repo and required claims after (null when removed)")
    changed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    actor = models.CharField(max_length=150, blank=True, help_text="Who or what made the change")
    reason = models.TextField(blank=True)
    changed_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.backend}: {self.provider} {self.identity} {self.action}"

    @property
    def summary(self) -> str:
        """One line for the history: what the mapping was and became."""

        def shown(state: dict | None) -> str:
            if not state:
                return "—"
            claims = state.get("required_claims") or {}
            only = "; ".join(f"{k} in {', '.join(v)}" for k, v in claims.items())
            return f"{state.get('repo')}" + (f" when {only}" if only else "")

        return f"{shown(self.before)} → {shown(self.after)}"
