"""What the relay records: upstream pull requests and deliveries, dispatches to backends, downstream job results
and the callbacks it refused (the allowlist itself is ``ootci.models.core``)."""

from datetime import datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.db import models
from django.db.models import Case, Exists, F, OuterRef, Q, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from ootci import levels
from ootci.events import Event
from ootci.levels import Level


class PullRequest(models.Model):
    class State(models.TextChoices):
        OPEN = "open"
        CLOSED = "closed"
        MERGED = "merged"

    upstream_repo = models.CharField(max_length=140)
    number = models.PositiveIntegerField()
    title = models.CharField(max_length=500, blank=True)
    author = models.CharField(max_length=100, blank=True)
    head_sha = models.CharField(max_length=40, blank=True)
    head_ref = models.CharField(max_length=255, blank=True)
    labels = models.JSONField(default=list, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.OPEN)
    html_url = models.URLField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-number"]
        constraints = [models.UniqueConstraint(fields=["upstream_repo", "number"], name="pr_unique_per_repo")]

    def __str__(self) -> str:
        return f"#{self.number} {self.title}"

    @property
    def wants_check_runs(self) -> bool:
        return self.state == self.State.OPEN


class Delivery(models.Model):
    delivery_id = models.CharField(max_length=100, unique=True, help_text="X-GitHub-Delivery")
    event = models.CharField(max_length=50)
    action = models.CharField(max_length=50, blank=True)
    upstream_repo = models.CharField(max_length=140)
    head_sha = models.CharField(max_length=40, blank=True)
    ref = models.CharField(max_length=255, blank=True)
    pull_request = models.ForeignKey(
        PullRequest, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    payload = models.JSONField(help_text="The verified webhook body")
    received_at = models.DateTimeField(default=timezone.now, db_index=True)
    archive_key = models.CharField(max_length=300, blank=True)
    # The delivery's effect is a task (a label's check-run backfill, a re-run request) that has not run yet. Set in
    # the transaction that stores the row and cleared by that task, so an effect whose task is lost (broker down,
    # worker killed) is finished by the "relay: finish pending deliveries" schedule.
    pending = models.BooleanField(default=False)

    class Meta:
        ordering = ["-received_at", "-id"]
        verbose_name_plural = "deliveries"
        indexes = [models.Index(fields=["received_at"], condition=Q(pending=True), name="delivery_pending")]

    def __str__(self) -> str:
        return f"{self.event}.{self.action} {self.delivery_id}" if self.action else f"{self.event} {self.delivery_id}"


def lost_cutoff(now: datetime | None = None) -> datetime:
    """Dispatches created before this that no job reported on are lost; jobs in progress since before it time out."""
    return (now or timezone.now()) - timedelta(hours=settings.ZOMBIE_TIMEOUT_HOURS)


class DispatchQuerySet(models.QuerySet):
    def lost(self, *, since: datetime | None = None, now: datetime | None = None) -> "DispatchQuerySet":
        """Dispatches to backends the HUD shows, sent (or still pending) before the cut-off, that no job ever reported
        on: the HUD counts each as an infrastructure failure, the sweeper logs them."""
        rows = self.filter(
            status__in=[Dispatch.Status.SENT, Dispatch.Status.PENDING],
            created_at__lt=lost_cutoff(now),
            backend__level__in=levels.shown_on_hud(),
        ).filter(~Exists(JobResult.objects.filter(dispatch=OuterRef("pk"))))
        return rows.filter(created_at__gte=since) if since is not None else rows


class Dispatch(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="dispatches")
    backend = models.ForeignKey("ootci.Backend", on_delete=models.CASCADE, related_name="dispatches")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    payload_trimmed = models.BooleanField(default=False, help_text="Large free-text fields were cut to fit")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    # Set while a pending dispatch waits out a GitHub outage or rate limit: the stale-dispatch schedule tries it
    # again from then on (relay.github.outbox), until DISPATCH_RETRY_WINDOW_HOURS after it was created.
    retry_at = models.DateTimeField(null=True, blank=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = DispatchQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "dispatches"
        constraints = [models.UniqueConstraint(fields=["delivery", "backend"], name="dispatch_unique_per_backend")]

    def __str__(self) -> str:
        return f"{self.delivery.delivery_id} → {self.backend.repo} ({self.status})"


# Expected-outcome jobs (the relay's probes, README "Expected outcomes"): a job whose name holds one of these words
# (``xfail``, ``xfail (2)``, ``probe-xtimeout``) succeeds when it ends with that conclusion, and fails otherwise.
EXPECTED_OUTCOMES = {"xfail": "failure", "xcancel": "cancelled", "xtimeout": "timed_out"}


def expected_outcome_named(word: str) -> Q:
    """Job names holding ``word`` as a word of its own (any case; bounded by anything but a letter or a digit)."""
    return Q(job_name__iregex=rf"(^|[^a-z0-9]){word}([^a-z0-9]|$)")


def expected_outcome_met() -> Q:
    found = Q()
    for word, conclusion in EXPECTED_OUTCOMES.items():
        found |= expected_outcome_named(word) & Q(conclusion=conclusion)
    return found


def expected_outcome_job() -> Q:
    found = Q()
    for word in EXPECTED_OUTCOMES:
        found |= expected_outcome_named(word)
    return found


class JobResult(models.Model):
    """One downstream job attempt. Rows are created and moved only by the state machine in ``ootci.jobs``."""

    class Status(models.TextChoices):
        IN_PROGRESS = "in_progress"
        COMPLETED = "completed"

    class Source(models.TextChoices):
        CALLBACK = "callback"
        INGEST = "ingest"
        SWEEPER = "sweeper"

    class Outcome(models.TextChoices):
        """How the HUD counts an attempt (README "How we count"); ``outcome`` below is the one place the rule lives."""

        SUCCESS = "success"
        TEST = "test", "test failure"
        INFRA = "infra", "infrastructure failure"
        RUNNING = "running"
        SKIPPED = "skipped"

    class ShaCheck(models.TextChoices):
        """A self-report's upstream SHA, asked of GitHub (``relay.endpoints.sha_check``); blank for dispatched jobs."""

        VERIFIED = "verified", "a commit of the upstream repository"
        UNVERIFIED = "unverified", "not checked yet: GitHub was unreachable"
        UNKNOWN = "unknown", "not a commit of the upstream repository (found on a re-check)"

    backend = models.ForeignKey("ootci.Backend", on_delete=models.CASCADE, related_name="job_results")
    dispatch = models.ForeignKey(Dispatch, null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs")
    delivery_id = models.CharField(max_length=100, help_text="Upstream delivery id; the tested SHA for nightly")
    event_type = models.CharField(max_length=20, choices=Event.choices)
    upstream_repo = models.CharField(max_length=140)
    pr_number = models.PositiveIntegerField(null=True, blank=True, db_index=True)
    head_sha = models.CharField(max_length=40, blank=True, db_index=True)
    workflow_name = models.CharField(max_length=255)
    job_name = models.CharField(max_length=255)
    run_id = models.CharField(max_length=100)
    run_attempt = models.PositiveIntegerField(default=1)
    check_run_id = models.CharField(max_length=100, blank=True, help_text="Downstream's check run id")
    status = models.CharField(max_length=12, choices=Status.choices)
    conclusion = models.CharField(max_length=30, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    queue_time = models.FloatField(
        null=True,
        blank=True,
        help_text="The workflow run's queue: seconds from dispatch sent to the run's first in_progress, kept on the "
        "job that started first (attempt 1)",
    )
    dependency_wait = models.FloatField(
        null=True,
        blank=True,
        help_text="Waiting for dependencies: seconds from its run's first in_progress to its own (later jobs of a run)",
    )
    execution_time = models.FloatField(null=True, blank=True, help_text="Seconds from in_progress to completed")
    passed = models.PositiveIntegerField(null=True, blank=True)
    failed = models.PositiveIntegerField(null=True, blank=True)
    skipped = models.PositiveIntegerField(null=True, blank=True)
    failed_tests = models.JSONField(default=list, blank=True)
    artifact_url = models.URLField(max_length=1000, blank=True)
    run_url = models.URLField(max_length=1000, blank=True)
    level = models.CharField(max_length=2, choices=Level.choices, blank=True, help_text="Backend level at report")
    upstream_check_run_id = models.BigIntegerField(null=True, blank=True)
    # Held by the task syncing the upstream check run while it talks to GitHub (a claim, not data: not in updated_at).
    check_run_claimed_at = models.DateTimeField(null=True, blank=True)
    one_shot = models.BooleanField(default=False, help_text="Completed without an in_progress report")
    relay_decided = models.BooleanField(default=False, help_text="Concluded by the relay (e.g. timed out)")
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.CALLBACK)
    # The classifier's verdict (ootci.failures.rules.failure_verdict, written by relay.reports.logs); blank until
    # classified.
    failure_class = models.CharField(max_length=10, blank=True)
    # One verdict per failed job (ootci.verdicts, set by relay.reports.verdicts); blank until known.
    verdict = models.CharField(max_length=20, blank=True)
    sha_check = models.CharField(max_length=10, choices=ShaCheck.choices, blank=True)
    auto_retry_at = models.DateTimeField(null=True, blank=True, help_text="When the relay re-ran it (infra)")
    auto_retry_note = models.CharField(max_length=200, blank=True, help_text="The automatic re-run, or why none")
    # Where it ran (ootci.environment): stated by the callback, filled in by the test report's properties and the job
    # API's runner. Shown and counted, never used for routing.
    environment = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    # The domain rules every reader shares, computed by the database on every write path (ORM saves, update(),
    # bulk writes) and copied as they are to ClickHouse. A generated value read on an instance after a write is
    # reloaded from the database (``ootci.jobs`` drops it from the instance).
    finished_at = models.GeneratedField(
        expression=Coalesce("completed_at", "started_at", "created_at"),
        output_field=models.DateTimeField(),
        db_persist=True,
        help_text="When the result is known: completion, else start, else report time (a lost in_progress)",
    )
    job_sha = models.GeneratedField(
        expression=Case(When(head_sha="", then=F("delivery_id")), default=F("head_sha")),
        output_field=models.CharField(max_length=100),
        db_persist=True,
        help_text="The tested SHA: head_sha, or delivery_id until one is known (nightly: the SHA itself)",
    )
    outcome = models.GeneratedField(
        expression=Case(
            When(~Q(status="completed"), then=Value(Outcome.RUNNING.value)),
            # Expected-outcome jobs: their expected end is a success, any other end a failure of the relay's path.
            When(expected_outcome_met(), then=Value(Outcome.SUCCESS.value)),
            When(expected_outcome_job(), then=Value(Outcome.INFRA.value)),
            When(conclusion="success", then=Value(Outcome.SUCCESS.value)),
            When(conclusion__in=["skipped", "neutral"], then=Value(Outcome.SKIPPED.value)),
            # A classified failure (ootci.failures.rules: relay facts, failed step, log rule, test report) decides.
            When(failure_class__in=["test", "build", "lint"], then=Value(Outcome.TEST.value)),
            When(failure_class="infra", then=Value(Outcome.INFRA.value)),
            When(Q(conclusion="failure") & (Q(failed__gt=0) | ~Q(failed_tests=[])), then=Value(Outcome.TEST.value)),
            default=Value(Outcome.INFRA.value),
        ),
        output_field=models.CharField(max_length=10, choices=Outcome.choices),
        db_persist=True,
        help_text="success (or an expected-outcome job's expected end); test failure (classified test/build/lint, "
        "else failure with failed tests); infra (any other end); running; skipped",
    )
    GENERATED = ("finished_at", "job_sha", "outcome")
    # One job attempt (the unique constraint below, by attname).
    ATTEMPT_FIELDS = ("backend_id", "delivery_id", "workflow_name", "job_name", "run_id", "run_attempt")
    # The attempts of one job (README "How we count"): its result is its latest attempt, by LATEST_ORDER. On
    # PostgreSQL each row also has ``newer_finished_at`` (the latest finish among its job's newer attempts), kept by
    # triggers on every write (migration ootci 0033) and read by the HUD to pick latest attempts; not a model field.
    JOB_FIELDS = ("backend_id", "event_type", "job_sha", "workflow_name", "job_name")
    LATEST_ORDER = ("-created_at", "-run_attempt", "-id")

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["backend", "delivery_id", "workflow_name", "job_name", "run_id", "run_attempt"],
                name="jobresult_unique_attempt",
            )
        ]
        indexes = [
            models.Index(fields=["backend", "event_type", "created_at"], name="job_backend_event_time"),
            models.Index(fields=["status", "created_at"], name="job_status_time"),
            # The HUD's windows select by finish time before picking latest attempts.
            models.Index(fields=["event_type", "finished_at"], name="job_event_finish"),
            models.Index(fields=["backend", "job_sha"], name="job_backend_sha"),
            # The self-reports whose SHA GitHub could not be asked about yet (relay.endpoints.sha_check).
            models.Index(fields=["created_at"], condition=Q(sha_check="unverified"), name="job_sha_unverified"),
        ]

    def __str__(self) -> str:
        return f"{self.backend.repo} {self.workflow_name}/{self.job_name} #{self.run_id}.{self.run_attempt}"

    @property
    def attempt_key(self) -> dict:
        """The fields of the unique constraint: what names this attempt."""
        return {name: getattr(self, name) for name in self.ATTEMPT_FIELDS}

    def attempts(self) -> "models.QuerySet[JobResult]":
        """Every attempt of this job (this one included), newest first."""
        return JobResult.objects.filter(**{name: getattr(self, name) for name in self.JOB_FIELDS}).order_by(
            *self.LATEST_ORDER
        )

    @staticmethod
    def safe_link(value) -> str:
        """``value`` if it is an http(s) URL that fits a link column, else "": reported links end up in hrefs,
        and a javascript: or data: one must not."""
        if not isinstance(value, str) or len(value.strip()) > 1000:
            return ""
        parts = urlsplit(value.strip())
        return value.strip() if parts.scheme in ("http", "https") and parts.netloc else ""


class CallbackRejection(models.Model):
    """A refused callback, kept so the HUD's relay-health strip can count them."""

    received_at = models.DateTimeField(default=timezone.now, db_index=True)
    repo = models.CharField(max_length=140, blank=True, help_text="Verified repository claim, when known")
    status_code = models.PositiveSmallIntegerField()
    detail = models.CharField(max_length=500)

    class Meta:
        ordering = ["-received_at"]

    def __str__(self) -> str:
        return f"{self.status_code} {self.repo or '?'}: {self.detail}"
