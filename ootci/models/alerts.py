"""On-call alerting: the rules (edited in the admin), the incidents they open and resolve, the channels each backend
opts into, and one notification row per incident and channel (what was sent, how often it was tried, why it failed).
The rules are evaluated and the notifications sent by ``relay.alerts.incidents`` and ``relay.alerts.notify``."""

from django.db import models
from django.db.models import Q
from django.utils import timezone


class AlertRule(models.Model):
    class Kind(models.TextChoices):
        BASELINE = "baseline_failures", "consecutive failures of a job on baseline runs (push, nightly, periodic)"
        PR_TEST = "pr_test_failure", "an L3/L4 test failure new on a PR"
        RELAY = "relay_health", "dispatch failures and lost dispatches above a rate"
        GATE = "gate_failing", "a readiness gate newly failing"
        STALE = "stale_results", "a backend gone silent: no result within its cadence, or PR dispatches unanswered"
        SICK_RUNNER = "sick_runner", "a runner (or runner label) failing significantly more than its backend over 24 h"
        SKIPS = "skips_growing", "more than threshold tests (0: SKIP_ALERT_TESTS) started skipping in a day"

    kind = models.CharField(max_length=20, choices=Kind.choices)
    backend = models.ForeignKey(
        "ootci.Backend",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        help_text="Blank: every backend (a backend's own rule of the same kind wins)",
    )
    enabled = models.BooleanField(default=True)
    threshold = models.FloatField(
        default=3, help_text="Baseline: consecutive failures; relay health: percent of dispatches failed or lost"
    )
    window_minutes = models.PositiveIntegerField(default=10, help_text="Relay health: the window of dispatches")
    resolve_after = models.PositiveIntegerField(default=3, help_text="Green results (or checks) in a row that resolve")
    cooldown_minutes = models.PositiveIntegerField(
        default=30, help_text="After an incident resolves, the same one does not open again for this long"
    )

    class Meta:
        ordering = ["kind", "backend__repo"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} ({self.backend or 'every backend'})"


class NotificationChannel(models.Model):
    class Kind(models.TextChoices):
        PR_COMMENT = "pr_comment", "comment on the upstream PR (edited in place)"
        REPO_ISSUE = "repo_issue", "issue in the backend's repository (baseline breakage)"
        WEBHOOK = "webhook", "JSON webhook (Slack-compatible text)"
        EMAIL = "email", "email"

    backend = models.ForeignKey(
        "ootci.Backend",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="channels",
        help_text="Blank: relay-wide incidents (relay health)",
    )
    kind = models.CharField(max_length=12, choices=Kind.choices)
    target = models.CharField(
        max_length=500, blank=True, help_text="Webhook: URL; email: addresses, comma-separated; others: not needed"
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["backend__repo", "kind"]

    def __str__(self) -> str:
        return f"{self.backend or 'relay'}: {self.kind}"


class Incident(models.Model):
    class State(models.TextChoices):
        FIRING = "firing"
        RESOLVED = "resolved"

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE)
    backend = models.ForeignKey(
        "ootci.Backend", null=True, blank=True, on_delete=models.CASCADE, related_name="incidents"
    )
    fingerprint = models.CharField(max_length=300, help_text="What it is about: rule kind, backend, job or PR")
    state = models.CharField(max_length=10, choices=State.choices, default=State.FIRING)
    what = models.TextField(help_text="What is wrong, in a sentence")
    details = models.JSONField(default=dict, blank=True)
    pr_number = models.PositiveIntegerField(null=True, blank=True)
    greens = models.PositiveIntegerField(default=0, help_text="Green results in a row while firing")
    opened_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at"]
        constraints = [
            # An incident opens once: concurrent evaluations race on this, the loser updates the winner's row.
            models.UniqueConstraint(fields=["fingerprint"], condition=Q(state="firing"), name="one_firing_incident")
        ]

    def __str__(self) -> str:
        return f"{self.state}: {self.what}"


class Notification(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="notifications")
    channel = models.ForeignKey(NotificationChannel, on_delete=models.CASCADE)
    target = models.CharField(max_length=500, blank=True, help_text="Where it went: URL, addresses, repo or PR")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    external_id = models.CharField(max_length=100, blank=True, help_text="The GitHub issue number, once opened")
    sent_state = models.CharField(max_length=10, blank=True, help_text="The incident state last sent")
    # Held by the sender while it talks to GitHub, a webhook or a mail server: a claim, never a lock across the call.
    claimed_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        constraints = [models.UniqueConstraint(fields=["incident", "channel"], name="one_notification_per_channel")]

    def __str__(self) -> str:
        return f"{self.channel}: {self.status}"


class PrComment(models.Model):
    """One comment per upstream PR, edited in place, a section per backend (``backend`` empty; rows with a backend are
    the one-comment-per-backend kind of earlier releases, kept as they were): the row a sender claims before it
    creates or edits the comment, so that concurrent completions never post two."""

    backend = models.ForeignKey("ootci.Backend", null=True, blank=True, on_delete=models.CASCADE)
    upstream_repo = models.CharField(max_length=140)
    pr_number = models.PositiveIntegerField()
    comment_id = models.BigIntegerField(null=True, blank=True)
    body = models.TextField(blank=True)
    # Held by the sender talking to GitHub (relay.alerts.notify): a claim, never a lock across the call.
    claimed_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["backend", "upstream_repo", "pr_number"], name="one_pr_comment"),
            models.UniqueConstraint(
                fields=["upstream_repo", "pr_number"], condition=Q(backend__isnull=True), name="one_comment_per_pr"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.backend or self.upstream_repo} on #{self.pr_number}"
