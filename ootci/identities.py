"""Services of the CI identities map (``ootci.models.identities``, which also holds the one rule of a pipeline's
required claims, ``claims_unmet``, that the relay applies to each verified token): every change is audited.

The admin and ``manage.py import_ci_providers`` both change the map through :func:`pipeline_save` and
:func:`pipeline_remove`, so each change, from any path, writes an IdentityChange row.
"""

from __future__ import annotations

from django.db import transaction

from ootci.models import Backend, BuildkitePipeline, IdentityChange, claims_unmet

__all__ = ["claims_unmet", "identity_change_record", "pipeline_remove", "pipeline_save"]

BUILDKITE = "buildkite"


def identity_change_record(
    *, backend: Backend, identity: str, before: dict | None, after: dict | None, user=None, actor: str, reason: str
) -> IdentityChange | None:
    """The audit row of one mapping change; None when nothing changed."""
    if before == after:
        return None
    action = IdentityChange.Action
    return IdentityChange.objects.create(
        backend=backend,
        provider=BUILDKITE,
        identity=identity,
        action=action.ADDED if before is None else action.REMOVED if after is None else action.CHANGED,
        before=before,
        after=after,
        changed_by=user,
        actor=actor or (user.get_username() if user else ""),
        reason=reason,
    )


def pipeline_save(
    *, pipeline: BuildkitePipeline, user=None, actor: str = "", reason: str = "", before: dict | None = None
) -> IdentityChange | None:
    """Save a (new or edited) mapping with its audit row. ``before`` is what it was, for an edited one (read from the
    database when not given); a mapping moved to another backend is audited on the backend it now reports as."""
    with transaction.atomic():
        if before is None and pipeline.pk:
            stored = BuildkitePipeline.objects.select_related("backend").filter(pk=pipeline.pk).first()
            before = stored.as_recorded() if stored else None
        pipeline.required_claims = pipeline.required_claims or {}
        pipeline.save()
        return identity_change_record(
            backend=pipeline.backend,
            identity=pipeline.key,
            before=before,
            after=pipeline.as_recorded(),
            user=user,
            actor=actor,
            reason=reason,
        )


def pipeline_remove(*, pipeline: BuildkitePipeline, user=None, actor: str = "", reason: str = "") -> IdentityChange:
    with transaction.atomic():
        change = identity_change_record(
            backend=pipeline.backend,
            identity=pipeline.key,
            before=pipeline.as_recorded(),
            after=None,
            user=user,
            actor=actor,
            reason=reason,
        )
        pipeline.delete()
        return change
