"""Why a job failed: the log classifier's rules (edited in the admin) and each failed job's classification."""

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from ootci.failures.regex import regex_problem


class FailureClass(models.TextChoices):
    INFRA = "infra"
    BUILD = "build"
    TEST = "test"
    LINT = "lint"
    UNKNOWN = "unknown"


class FailureRule(models.Model):
    """One rule of the log classifier: each rule keeps its last match in a log; the highest priority wins."""

    name = models.CharField(max_length=100, unique=True)
    regex = models.TextField(help_text="Python regular expression, matched against one log line at a time")
    failure_class = models.CharField(max_length=10, choices=FailureClass.choices)
    priority = models.IntegerField(default=0, help_text="Higher wins when several rules match a log")
    backend = models.ForeignKey(
        "ootci.Backend",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="failure_rules",
        help_text="Only for this backend's logs; empty: every backend",
    )
    enabled = models.BooleanField(default=True)
    notes = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-priority", "name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        # Imported here: the check runs a subprocess and models must stay importable without it.

        problem = regex_problem(self.regex)
        if problem:
            raise ValidationError({"regex": problem})


class JobFailure(models.Model):
    """The classification of one failed job attempt (written by relay.reports.logs, read by the HUD).

    ``failure_class`` and ``source`` are the verdict of ``ootci.failures.rules.failure_verdict``; the same class is
    copied to ``JobResult.failure_class``, which the job's generated ``outcome`` reads.
    """

    class Source(models.TextChoices):
        RELAY = "relay", "relay fact"
        STEP = "step", "failed step"
        RULE = "rule", "log rule"
        TEST_REPORT = "test_report", "test report"
        CALLBACK = "callback", "callback test results"
        NONE = "none", "nothing known"

    job = models.OneToOneField("ootci.JobResult", on_delete=models.CASCADE, related_name="failure")
    failure_class = models.CharField(max_length=10, choices=FailureClass.choices, blank=True)
    source = models.CharField(max_length=12, choices=Source.choices, default=Source.NONE)
    rule = models.ForeignKey(FailureRule, null=True, blank=True, on_delete=models.SET_NULL, related_name="failures")
    rule_name = models.CharField(max_length=100, blank=True, help_text="Kept when the rule is deleted")
    rule_class = models.CharField(max_length=10, blank=True, help_text="The matched rule's own class")
    line_number = models.PositiveIntegerField(null=True, blank=True, help_text="1-based, in the whole job log")
    line = models.TextField(blank=True)
    groups = models.JSONField(default=list, blank=True)
    context = models.JSONField(default=list, blank=True, help_text="Up to 12 lines before the matched line")
    signature = models.CharField(max_length=500, blank=True, db_index=True)
    step_number = models.PositiveIntegerField(null=True, blank=True, help_text="The step of the matched line")
    step_line = models.PositiveIntegerField(null=True, blank=True, help_text="The matched line within its step")
    failed_step = models.CharField(max_length=255, blank=True, help_text="The first failed step GitHub reports")
    failed_step_number = models.PositiveIntegerField(null=True, blank=True)
    failed_step_started_at = models.DateTimeField(null=True, blank=True, help_text="The failed step's start (job API)")
    failed_step_completed_at = models.DateTimeField(null=True, blank=True, help_text="The failed step's end (job API)")
    github_job_id = models.BigIntegerField(null=True, blank=True)
    log_key = models.CharField(max_length=500, blank=True, help_text="Key of the raw log in TEST_REPORTS_URL")
    log_sha256 = models.CharField(max_length=64, blank=True)
    log_bytes = models.BigIntegerField(null=True, blank=True)
    problem = models.CharField(max_length=500, blank=True, help_text="Why the log could not be read or classified")
    classified_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-classified_at"]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.failure_class or '—'} ({self.source})"

    @property
    def line_url(self) -> str:
        """The line on GitHub: ``<run url>/job/<job id>#step:<n>:<line>``, when the log came from GitHub."""
        if not (self.job.run_url and self.github_job_id):
            return ""
        base = f"{self.job.run_url.rstrip('/')}/job/{self.github_job_id}"
        if self.step_number and self.step_line:
            return f"{base}#step:{self.step_number}:{self.step_line}"
        return base


class Exoneration(models.Model):
    """A check run concluded neutral rather than failure: every failure of the job was infra, disabled, flaky or
    broken-baseline (``ootci.verdicts``). Counted per backend on the readiness page as an impact figure."""

    job = models.OneToOneField("ootci.JobResult", on_delete=models.CASCADE, related_name="exoneration")
    backend = models.ForeignKey("ootci.Backend", on_delete=models.CASCADE, related_name="exonerations")
    verdict = models.CharField(max_length=20, help_text="The job's verdict")
    rule = models.CharField(max_length=300, help_text="Why it was exonerated")
    tests = models.JSONField(default=list, help_text="[{test_id, verdict, evidence}] (the first 50)")
    evidence = models.JSONField(default=dict, help_text="The baseline run and the failure line it was decided on")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return f"{self.job_id}: {self.verdict}"
