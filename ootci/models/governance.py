"""Level governance: the reviews behind every level change, the notices of failing gates, temporary downgrades.

``Backend.level`` is the **effective** level: the one every policy reads (dispatch, HUD, check runs). During a
temporary downgrade the **allowlisted** level (what PyTorch's allowlist file says, and what the backend returns to) is
the downgrade's ``restore_to``; :func:`allowlisted_level` is the one place that tells them apart.
"""

from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from ootci.levels import Level

if TYPE_CHECKING:
    from ootci.models.core import Backend


class LevelReview(models.Model):
    """A level decision with its evidence: an admin's change (applied), a schedule's proposal (never applied by
    itself), a temporary downgrade or its restoration."""

    class Kind(models.TextChoices):
        CHANGE = "change"
        PROPOSAL = "proposal"
        DOWNGRADE = "downgrade"
        RESTORE = "restore"

    class State(models.TextChoices):
        APPLIED = "applied"
        PROPOSED = "proposed"
        DISMISSED = "dismissed"

    backend = models.ForeignKey("ootci.Backend", on_delete=models.CASCADE, related_name="level_reviews")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    state = models.CharField(max_length=10, choices=State.choices)
    from_level = models.CharField(max_length=2, choices=Level.choices)
    to_level = models.CharField(max_length=2, choices=Level.choices)
    promotion_days = models.PositiveSmallIntegerField()
    demotion_days = models.PositiveSmallIntegerField()
    figures = models.JSONField(default=dict, help_text="The readiness as evaluated: windows, gates, values")
    verdict = models.CharField(max_length=10)
    verdict_text = models.CharField(max_length=200, blank=True)
    reason = models.TextField(blank=True)
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    actor = models.CharField(max_length=150, blank=True)
    level_change = models.OneToOneField("ootci.LevelChange", null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # One open proposal per backend: the schedule that proposes runs often and must not pile them up.
            models.UniqueConstraint(fields=["backend"], condition=Q(state="proposed"), name="one_open_proposal")
        ]

    def __str__(self) -> str:
        return f"{self.backend}: {self.from_level} → {self.to_level} ({self.kind}, {self.state})"


class GateNotice(models.Model):
    """A backend whose own level's gates fail over the demotion window: since when (the notice), so that the
    verdict can say when a demotion falls due. Kept by the readiness schedule; gone once the gates pass again."""

    backend = models.OneToOneField("ootci.Backend", on_delete=models.CASCADE, related_name="gate_notice")
    failing_since = models.DateTimeField()
    gates = models.JSONField(default=list)

    def __str__(self) -> str:
        return f"{self.backend}: failing since {self.failing_since:%Y-%m-%d}"


class TemporaryDowngrade(models.Model):
    """An L3/L4 backend run at a lower effective level until its figures pass its allowlisted level's gates for
    ``recover_days`` days in a row, or until ``until``; restored by the readiness schedule."""

    backend = models.ForeignKey("ootci.Backend", on_delete=models.CASCADE, related_name="downgrades")
    restore_to = models.CharField(max_length=2, choices=Level.choices, help_text="The allowlisted level")
    effective = models.CharField(max_length=2, choices=Level.choices)
    until = models.DateTimeField(null=True, blank=True, help_text="Restore at this time at the latest")
    recover_days = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Restore once the gates pass for this many days in a row"
    )
    passing_since = models.DateTimeField(null=True, blank=True)
    reason = models.TextField()
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(fields=["backend"], condition=Q(ended_at=None), name="one_active_downgrade"),
            models.CheckConstraint(
                condition=Q(until__isnull=False) | Q(recover_days__isnull=False), name="downgrade_ends"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.backend}: {self.restore_to} → {self.effective}"


def allowlisted_level(backend: "Backend") -> str:
    """The level PyTorch's allowlist gives ``backend``: its level, or the level a temporary downgrade restores."""
    active = backend.downgrades.filter(ended_at=None).first()
    return active.restore_to if active else backend.level
