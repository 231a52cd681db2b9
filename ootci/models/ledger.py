"""The skip ledger (``ootci.ledger``): what each baseline run of a backend's job covers, by upstream test file, and
how it differs from the previous baseline run of the same job.

Compact by design: the cases themselves stay in TestCase; the ledger keeps counts per run and test file, and per run
only the test ids whose state changed (capped per kind, with the true counts beside them).
"""

from django.db import models


class LedgerRun(models.Model):
    """One baseline run (a nightly or push job attempt with a parsed report): its totals and its diff against the
    previous baseline run of the same job (workflow and job name)."""

    CHANGE_KINDS = ("added", "removed", "started_skipping", "stopped_skipping", "xpass")

    job = models.OneToOneField("ootci.JobResult", on_delete=models.CASCADE, related_name="ledger")
    backend = models.ForeignKey("ootci.Backend", on_delete=models.CASCADE, related_name="ledger_runs")
    workflow_name = models.CharField(max_length=255)
    job_name = models.CharField(max_length=255)
    sha = models.CharField(max_length=100)
    finished_at = models.DateTimeField()
    day = models.DateField(help_text="The run's finish day (UTC): diffs roll up by it")
    collected = models.PositiveIntegerField(default=0)
    passed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0, help_text="Failed and errored")
    skipped = models.PositiveIntegerField(default=0)
    xfailed = models.PositiveIntegerField(default=0)
    xpassed = models.PositiveIntegerField(default=0)
    disabled = models.PositiveIntegerField(default=0, help_text="Tests of the run on the backend's disabled list")
    previous = models.ForeignKey(
        "ootci.JobResult", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", help_text="Diffed with"
    )
    added = models.PositiveIntegerField(default=0)
    removed = models.PositiveIntegerField(default=0)
    started_skipping = models.PositiveIntegerField(default=0)
    stopped_skipping = models.PositiveIntegerField(default=0)
    xpass = models.PositiveIntegerField(default=0, help_text="Unexpected passes: candidates to leave the skip list")
    changes = models.JSONField(default=dict, blank=True, help_text="Test ids per change kind, the first CAP of each")
    computed_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-finished_at", "-id"]
        indexes = [
            models.Index(fields=["backend", "day"], name="ledger_backend_day"),
            models.Index(fields=["backend", "workflow_name", "job_name", "finished_at"], name="ledger_backend_job"),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_name}/{self.job_name} {self.sha[:10]}: {self.skipped} of {self.collected} skipped"


class LedgerFile(models.Model):
    """One upstream test file in one baseline run: how many of its tests were collected and how each ended."""

    run = models.ForeignKey(LedgerRun, on_delete=models.CASCADE, related_name="files")
    backend = models.ForeignKey("ootci.Backend", on_delete=models.CASCADE, related_name="+")
    file = models.CharField(max_length=500)
    collected = models.PositiveIntegerField(default=0)
    passed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    xfailed = models.PositiveIntegerField(default=0)
    disabled = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["file"]
        constraints = [models.UniqueConstraint(fields=["run", "file"], name="ledger_file_once_per_run")]

    def __str__(self) -> str:
        return f"{self.file}: {self.skipped} of {self.collected} skipped"
