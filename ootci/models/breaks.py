"""Breaks: tests that newly fail on a backend's baseline run (nightly or push) at upstream commit N after passing at
its previous one, N−1 (``ootci.baseline``); the upstream commits in (N−1, N] ranked as suspects with their evidence
(``ootci.breaks``); a bisection on demand, one ``repository_dispatch`` of event ``bisect`` per step; and the cache of
what GitHub said of those commits. Written by ``relay.breaks``, read by ``hud.breaks``."""

from django.conf import settings
from django.db import models
from django.utils import timezone

BISECT_EVENT = "bisect"  # the repository_dispatch event_type (and JobResult.event_type) of a bisection step


class Break(models.Model):
    """One break: every test new-failing at the same upstream commit (N), on one backend or several."""

    class State(models.TextChoices):
        OPEN = "open"
        CLOSED = "closed"

    class Bisection(models.TextChoices):
        NONE = "", "not asked"
        RUNNING = "running"
        FOUND = "found", "found one commit"
        INCONCLUSIVE = "inconclusive", "stopped: runs inconclusive twice"
        CAPPED = "capped", "stopped: the backend's daily cap of bisection dispatches"
        FAILED = "failed", "stopped: a dispatch failed"

    upstream_repo = models.CharField(max_length=140)
    good_sha = models.CharField(max_length=40, help_text="N−1: the previous baseline run's commit (passed)")
    bad_sha = models.CharField(max_length=40, help_text="N: the baseline run's commit where the tests newly fail")
    state = models.CharField(max_length=10, choices=State.choices, default=State.OPEN, db_index=True)
    opened_at = models.DateTimeField(default=timezone.now, db_index=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_note = models.CharField(max_length=500, blank=True, help_text="The run that passed the tests again")
    commits = models.JSONField(default=list, blank=True, help_text="The SHAs in (N−1, N], oldest first")
    suspects_at = models.DateTimeField(null=True, blank=True, help_text="When the suspects were last ranked")
    bisection = models.CharField(max_length=12, choices=Bisection.choices, blank=True, default="")
    bisect_backend = models.ForeignKey("ootci.Backend", null=True, blank=True, on_delete=models.SET_NULL)
    bisect_note = models.CharField(max_length=500, blank=True)
    bisect_requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    culprit_sha = models.CharField(max_length=40, blank=True, help_text="The one commit a bisection ended at")

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["upstream_repo", "bad_sha"], name="one_break_per_commit")]

    def __str__(self) -> str:
        return f"break at {self.bad_sha[:12]} ({self.state})"


class BreakTest(models.Model):
    """A test of a break on one backend: failing in ``job`` at N, passed in ``good_job`` at N−1; fixed once a later
    baseline run passes it."""

    __test__ = False  # not a pytest class

    brk = models.ForeignKey(Break, on_delete=models.CASCADE, related_name="tests")
    backend = models.ForeignKey("ootci.Backend", on_delete=models.CASCADE, related_name="break_tests")
    test_id = models.CharField(max_length=1000)
    file = models.CharField(max_length=500, blank=True)
    message = models.TextField(blank=True, help_text="The failure's first lines (the traceback's files are read)")
    job = models.ForeignKey("ootci.JobResult", null=True, on_delete=models.SET_NULL, related_name="+")
    good_job = models.ForeignKey("ootci.JobResult", null=True, on_delete=models.SET_NULL, related_name="+")
    fixed_job = models.ForeignKey("ootci.JobResult", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    fixed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["test_id", "backend_id"]
        constraints = [models.UniqueConstraint(fields=["brk", "backend", "test_id"], name="one_break_test_per_backend")]
        indexes = [models.Index(fields=["backend", "fixed_at"], name="breaktest_backend_open")]

    def __str__(self) -> str:
        return f"{self.test_id} in break {self.brk_id}"


class Suspect(models.Model):
    """An upstream commit in (N−1, N], its merged PR, its tier (``ootci.breaks.TIERS``) and the evidence."""

    brk = models.ForeignKey(Break, on_delete=models.CASCADE, related_name="suspects")
    sha = models.CharField(max_length=40)
    position = models.PositiveIntegerField(help_text="Its place in the range, 0 the oldest")
    rank = models.PositiveIntegerField(help_text="1 the likeliest")
    tier = models.CharField(max_length=10)
    pr_number = models.PositiveIntegerField(null=True, blank=True)
    title = models.CharField(max_length=500, blank=True)
    url = models.URLField(max_length=500, blank=True)
    evidence = models.JSONField(default=list, blank=True, help_text='[{"kind", "text", "url"}]')

    class Meta:
        ordering = ["rank"]
        constraints = [models.UniqueConstraint(fields=["brk", "sha"], name="one_suspect_per_commit")]

    def __str__(self) -> str:
        return f"#{self.rank} {self.sha[:12]} ({self.tier})"


class BisectStep(models.Model):
    class State(models.TextChoices):
        DISPATCHED = "dispatched"
        GOOD = "good", "passed the tests"
        BAD = "bad", "failed a test"
        INCONCLUSIVE = "inconclusive", "no result for the tests"

    brk = models.ForeignKey(Break, on_delete=models.CASCADE, related_name="steps")
    backend = models.ForeignKey("ootci.Backend", on_delete=models.CASCADE, related_name="+")
    sha = models.CharField(max_length=40)
    dispatch = models.OneToOneField("ootci.Dispatch", null=True, on_delete=models.SET_NULL, related_name="bisect_step")
    job = models.ForeignKey("ootci.JobResult", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    state = models.CharField(max_length=12, choices=State.choices, default=State.DISPATCHED)
    note = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.sha[:12]}: {self.state}"


class UpstreamCommit(models.Model):
    """What GitHub said of an upstream commit, as the App (cached: a commit never changes): its title, the files it
    touched and the PRs it was merged by (GET /repos/{repo}/commits/{sha} and …/pulls)."""

    upstream_repo = models.CharField(max_length=140)
    sha = models.CharField(max_length=40)
    title = models.CharField(max_length=500, blank=True)
    files = models.JSONField(default=list, blank=True)
    pulls = models.JSONField(default=list, blank=True, help_text='[{"number", "title", "url"}]')
    fetched_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["upstream_repo", "sha"], name="one_upstream_commit")]

    def __str__(self) -> str:
        return self.sha


class CompareRange(models.Model):
    """GitHub's compare of two upstream commits (the SHAs of ``base...head``, oldest first), cached."""

    upstream_repo = models.CharField(max_length=140)
    base = models.CharField(max_length=40)
    head = models.CharField(max_length=40)
    shas = models.JSONField(default=list)
    fetched_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["upstream_repo", "base", "head"], name="one_compare")]

    def __str__(self) -> str:
        return f"{self.base[:12]}...{self.head[:12]}"
