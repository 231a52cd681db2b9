"""Per-test results: the raw test reports of a job attempt (pulled from its GitHub Actions artifact or uploaded)
and every case parsed from them.

Rows are written by trusted tasks only (relay.reports.pull): downstream CI sends bytes, never rows.
"""

from django.db import models
from django.db.models import Q
from django.utils import timezone

MESSAGE_CAP = 2048  # characters of a failure message kept per case


class TestReport(models.Model):
    """One raw report file (JUnit XML, or a zip/tar.gz of them) of a job attempt, kept in the intermediate store
    (TEST_REPORTS_URL) under ``store_key`` and parsed by a task."""

    __test__ = False  # not a pytest class

    class Source(models.TextChoices):
        ARTIFACT = "artifact", "GitHub Actions artifact"
        UPLOAD = "upload", "direct upload"

    class State(models.TextChoices):
        PENDING = "pending"
        PARSED = "parsed"
        REFUSED = "refused", "refused (hostile or over a cap)"
        FAILED = "failed", "failed (stored bytes unreadable)"

    job = models.ForeignKey("ootci.JobResult", on_delete=models.CASCADE, related_name="test_reports")
    source = models.CharField(max_length=10, choices=Source.choices)
    artifact_id = models.BigIntegerField(null=True, blank=True, help_text="GitHub's artifact id (artifact source)")
    artifact_name = models.CharField(max_length=255, blank=True)
    digest = models.CharField(max_length=64, help_text="sha256 of the stored bytes")
    size = models.BigIntegerField(help_text="Bytes as received (compressed)")
    content_type = models.CharField(max_length=100, blank=True)
    content_encoding = models.CharField(max_length=20, blank=True)
    store_key = models.CharField(max_length=500, help_text="Key in TEST_REPORTS_URL")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING, db_index=True)
    reason = models.TextField(blank=True, help_text="Why it was refused or failed")
    cases = models.PositiveIntegerField(default=0)
    passed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    xfailed = models.PositiveIntegerField(default=0)
    xpassed = models.PositiveIntegerField(default=0)
    reruns = models.PositiveIntegerField(default=0, help_text="Rerun/flaky markers counted over all cases")
    duration = models.FloatField(default=0, help_text="Sum of the cases' times, seconds")
    received_at = models.DateTimeField(default=timezone.now, db_index=True)
    parsed_at = models.DateTimeField(null=True, blank=True, db_index=True)
    # Held by the task parsing it while it reads the stored bytes (relay.reports.pull): a claim, never a lock.
    parse_claimed_at = models.DateTimeField(null=True, blank=True)
    replaced = models.BooleanField(
        default=False,
        help_text="Parsed once and queued to be parsed again: copies of the earlier parse's cases (ClickHouse's) must "
        "go once this parse ends (hud.stores.clickhouse.copy_cases)",
    )

    class Meta:
        ordering = ["-received_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["job", "digest"], name="testreport_unique_bytes_per_job")]
        indexes = [models.Index(fields=["id"], condition=Q(replaced=True), name="testreport_replaced")]

    def __str__(self) -> str:
        return f"{self.source} report {self.digest[:12]} of job {self.job_id} ({self.state})"


class TestCase(models.Model):
    """A case of a parsed report, passed ones included (per-test history needs the passes): failed, errored,
    skipped, xfail/xpass, passed, or passed only after reruns (flaky)."""

    __test__ = False

    class Status(models.TextChoices):
        PASSED = "passed"
        FAILED = "failed"
        ERROR = "error"
        SKIPPED = "skipped"
        XFAIL = "xfail"
        XPASS = "xpass"

    report = models.ForeignKey(TestReport, on_delete=models.CASCADE, related_name="test_cases")
    job = models.ForeignKey("ootci.JobResult", on_delete=models.CASCADE, related_name="test_cases")
    file = models.CharField(max_length=500, blank=True)
    classname = models.CharField(max_length=500, blank=True)
    name = models.CharField(max_length=1000)
    test_id = models.CharField(max_length=1000, help_text="file::Class::name with the device made generic")
    status = models.CharField(max_length=10, choices=Status.choices)
    duration = models.FloatField(default=0)
    reruns = models.PositiveIntegerField(default=0)
    message = models.TextField(blank=True, help_text=f"The first {MESSAGE_CAP} characters")

    FAILING = (Status.FAILED, Status.ERROR, Status.XPASS)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["job", "status"], name="testcase_job_status"),
            # Covering: a test's history (hud.stores.db.failing, hud.stores.db.history) is read from the index alone
            # (reruns too: without it the failing tests' history, which reads it, fetched every case from the table).
            models.Index(
                fields=["test_id"], include=["job", "status", "report", "id", "reruns"], name="testcase_test_history_r"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.test_id} {self.status}"


class TestDay(models.Model):
    """One test's results on one day (UTC) of report arrival, over every backend: what the test search reads instead
    of every case (``hud.stores.db.history``). Kept by ``ootci.case_days`` in the transaction that parses a report or
    takes a parsed one back for a re-parse, so it always equals the cases of the parsed reports of that day."""

    __test__ = False

    test_id = models.CharField(max_length=1000)
    day = models.DateField()
    runs = models.PositiveIntegerField(default=0, help_text="Counted results: passes and failures")
    failures = models.PositiveIntegerField(default=0)
    last_run = models.DateTimeField(help_text="The latest arrival of a report with the test, any status")
    last_failure = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["test_id", "day"], name="testday_unique_test_day")]
        indexes = [models.Index(fields=["day"], name="testday_day")]

    def __str__(self) -> str:
        return f"{self.test_id} on {self.day}"


class TestRecent(models.Model):
    """One test's last results on one backend's nightly and push runs: what the failing-tests classification reads as
    its history (flakiness, failing since; ``hud.stores.db.failing``) instead of every case of the test. Kept by
    ``ootci.case_recent`` in the transaction that parses a report or takes a parsed one back, so it always holds the
    newest ``ootci.verdicts.HISTORY`` counted cases of the parsed reports."""

    __test__ = False

    # Indexed by the unique (backend, test) constraint, which leads with it.
    backend = models.ForeignKey("ootci.Backend", on_delete=models.CASCADE, related_name="+", db_index=False)
    test_id = models.CharField(max_length=1000)
    results = models.JSONField(
        default=list,
        help_text="Newest first: [arrival (µs since the epoch), report id, case id, status, reruns, job id, job SHA]",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["backend", "test_id"], name="testrecent_unique_backend_test")]

    def __str__(self) -> str:
        return f"{self.test_id} on backend {self.backend_id}"
