"""The allowlist: backends, their levels and events, and the audit trail of every level change (what the relay
records of upstream events and downstream jobs is ``ootci.models.runs``)."""

import re
from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator, validate_slug
from django.db import models, transaction
from django.db.models.functions import Lower
from django.utils import timezone

from ootci import levels
from ootci.events import Event
from ootci.levels import Level

REPO_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")
# The HUD's own pages sit where a backend's would: /oot/tests/<test id>/ (any path) and /oot/pr/<number>/.
RESERVED_ORGS = frozenset({"tests", "pr"})


def reserved_org_problem(repo: str) -> str:
    """Why a backend cannot be ``repo`` for its organisation's name ("" when it can)."""
    org = repo.split("/", 1)[0]
    if org.lower() not in RESERVED_ORGS:
        return ""
    return (
        f"The HUD's own pages take /oot/{org.lower()}/… (the test search and test pages, the PR pages), so a backend "
        f"of the organisation “{org}” could not be shown; ask for OOT CI to rename those pages first."
    )


validate_repo = RegexValidator(REPO_PATTERN, "Enter a repository as org/name, e.g. ascend/pytorch-npu.")


def default_events() -> list[str]:
    return [Event.PULL_REQUEST, Event.PUSH]


class Backend(models.Model):
    # What the relay's write endpoints read of their caller, on every callback (the rest deferred).
    CALLER_FIELDS = ("id", "repo", "level", "device", "enabled")

    repo = models.CharField(max_length=140, validators=[validate_repo], help_text="org/name of the downstream repo")
    level = models.CharField(max_length=2, choices=Level.choices, default=Level.L1)
    device = models.CharField(
        max_length=50,
        blank=True,
        validators=[validate_slug],
        help_text="Slug; L3 backends are selected on a PR by the label ciflow/oot/<device>.",
    )
    oncalls = models.JSONField(default=list, blank=True, help_text="GitHub handles, without @")
    events = models.JSONField(default=default_events, help_text="Upstream events relayed to this backend")
    enabled = models.BooleanField(default=True)
    report_pattern = models.CharField(
        max_length=100,
        default="test-reports*",
        help_text="Artifacts of a run whose name matches this glob and contains the job name are its test reports.",
    )
    nightly_cadence_minutes = models.PositiveIntegerField(
        default=1440, help_text="A nightly result is expected this often; silent after cadence + grace"
    )
    periodic_cadence_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="A periodic result is expected this often (empty: no periodic cadence)"
    )
    stale_grace_minutes = models.PositiveIntegerField(
        default=120, help_text="Slack past a cadence, and the time a PR dispatch has to be answered with in_progress"
    )
    exonerate = models.BooleanField(
        null=True,
        blank=True,
        help_text="Check runs conclude neutral when every failure is infra, disabled, flaky or broken-baseline "
        "(ootci.verdicts). Empty: the level's default (on at L4, off at L3).",
    )
    probe = models.BooleanField(
        default=False,
        help_text="The relay's own probe (e.g. pytorch/crcr-test): its results are the relay-health cards of the "
        "summary page, and it is left out of the backends' figures.",
    )
    bisect = models.BooleanField(
        default=False,
        help_text="Maintainers may ask for a bisection of a break: the relay dispatches repository_dispatch events "
        'of type bisect, one upstream SHA each (README "Breaks"), up to BISECT_DAILY_CAP a day.',
    )
    notes = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["repo"]
        constraints = [
            models.UniqueConstraint(Lower("repo"), name="backend_repo_unique_ci"),
            models.CheckConstraint(condition=models.Q(level__in=Level.values), name="backend_level_valid"),
        ]

    def __str__(self) -> str:
        return self.repo

    @property
    def exonerates(self) -> bool:
        return self.level == Level.L4 if self.exonerate is None else self.exonerate

    @property
    def policy(self) -> levels.Policy:
        return levels.policy(self.level)

    @property
    def label(self) -> str:
        """The PR label that turns on check runs for an L3 backend."""
        return levels.l3_label(self.device) if self.device else ""

    @property
    def check_run_prefix(self) -> str:
        return self.device or self.repo.split("/", 1)[1]

    def clean(self) -> None:
        errors = {}
        if self.level == Level.L3 and not self.device:
            errors["device"] = "An L3 backend needs a device: its PR label is ciflow/oot/<device>."
        bad = [e for e in self.events or [] if e not in Event.values]
        if bad or not isinstance(self.events, list):
            errors["events"] = f"Events must be a list drawn from {', '.join(Event.values)}; got {self.events!r}."
        if not isinstance(self.oncalls, list) or not all(isinstance(h, str) and h for h in self.oncalls):
            errors["oncalls"] = "On-calls must be a list of GitHub handles."
        if self.repo:
            self.repo = self.repo.strip().strip("/")
            clash = Backend.objects.filter(repo__iexact=self.repo).exclude(pk=self.pk)
            if clash.exists():
                errors["repo"] = f"{clash.first().repo} is already in the allowlist (names are compared ignoring case)."
            elif problem := reserved_org_problem(self.repo):
                errors["repo"] = problem
        if errors:
            raise ValidationError(errors)

    def change_level(
        self, to: str, *, user=None, actor: str = "", reason: str = "", at: datetime | None = None
    ) -> "LevelChange | None":
        """The one way a backend gets a level: a new backend is saved at ``to``, an existing one moved to it, each
        with its audit row (LevelChange) in the same transaction. A no-op when an existing backend is already there.
        """
        adding = self._state.adding
        if to == self.level and not adding:
            return None
        with transaction.atomic():
            from_level = "" if adding else self.level
            self.level = to
            if adding:
                self.save()
            else:
                self.save(update_fields=["level", "updated_at"])
            return LevelChange.objects.create(
                backend=self,
                from_level=from_level,
                to_level=to,
                changed_by=user,
                actor=actor or (user.get_username() if user else ""),
                reason=reason,
                changed_at=at or timezone.now(),
            )


class LevelChange(models.Model):
    backend = models.ForeignKey(Backend, on_delete=models.CASCADE, related_name="level_changes")
    from_level = models.CharField(max_length=2, choices=Level.choices, blank=True, help_text="Blank when added")
    to_level = models.CharField(max_length=2, choices=Level.choices)
    changed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    actor = models.CharField(max_length=150, blank=True, help_text="Who or what made the change")
    reason = models.TextField(blank=True)
    changed_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.backend}: {self.from_level or '—'} → {self.to_level}"
