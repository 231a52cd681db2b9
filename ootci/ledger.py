"""The skip ledger: for each baseline run of a backend's job (``ootci.baseline``: a nightly or push run with a parsed
test report), the upstream tests collected, passed, failed, skipped, xfailed and on the disabled list, by test file,
and its diff against the previous baseline run of the same job — tests added, removed, started skipping, stopped
skipping, and unexpected passes (XPASS: remove them from the skip list).

Recorded when the run's report is parsed (``relay.tasks.ledger_record``), from the cases PostgreSQL already keeps
(TestCase), into two compact tables (``ootci.models.ledger``); safe to run twice (a run's rows are replaced). The HUD's
coverage page (``hud.coverage``) reads them and nothing else.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Sum, Window
from django.db.models.functions import RowNumber

from ootci import verdicts
from ootci.models import DisabledTest, JobResult, LedgerFile, LedgerRun, TestCase, TestReport

CAP = 5000  # test ids kept per change kind and run (the counts are always whole)
NO_FILE = "(no file)"
# A case's status as the ledger counts it.
COUNTED_AS = {
    TestCase.Status.PASSED: "passed",
    TestCase.Status.FAILED: "failed",
    TestCase.Status.ERROR: "failed",
    TestCase.Status.XPASS: "xpassed",
    TestCase.Status.SKIPPED: "skipped",
    TestCase.Status.XFAIL: "xfailed",
}


@dataclass(frozen=True)
class Diff:
    added: list[str]
    removed: list[str]
    started_skipping: list[str]
    stopped_skipping: list[str]
    xpass: list[str]

    def counts(self) -> dict[str, int]:
        return {kind: len(getattr(self, kind)) for kind in LedgerRun.CHANGE_KINDS}


def ledger_diff(before: dict[str, str], after: dict[str, str]) -> Diff:
    """What changed from the run ``before`` to ``after`` (test id → case status), each list sorted."""
    skipped = TestCase.Status.SKIPPED
    started = [t for t, s in after.items() if s == skipped and t in before and before[t] != skipped]
    stopped = [t for t, s in after.items() if s != skipped and before.get(t) == skipped]
    return Diff(
        added=sorted(after.keys() - before.keys()),
        removed=sorted(before.keys() - after.keys()),
        started_skipping=sorted(started),
        stopped_skipping=sorted(stopped),
        xpass=sorted(t for t, s in after.items() if s == TestCase.Status.XPASS),
    )


def is_baseline_run(job: JobResult) -> bool:
    return job.event_type in verdicts.BASELINE_EVENTS


def previous_run(job: JobResult) -> JobResult | None:
    """The previous baseline run of the same job: the newest nightly or push attempt of that workflow and job with a
    parsed report, finished before it at another upstream SHA (as ``ootci.baseline.previous_baseline``)."""
    parsed = TestReport.objects.filter(job=OuterRef("pk"), state=TestReport.State.PARSED)
    earlier = JobResult.objects.filter(
        Exists(parsed),
        backend_id=job.backend_id,
        event_type__in=verdicts.BASELINE_EVENTS,
        workflow_name=job.workflow_name,
        job_name=job.job_name,
        finished_at__lt=job.finished_at,
    ).exclude(job_sha=job.job_sha)
    return earlier.order_by("-finished_at", "-id").first()


def ledger_record(*, job_id: int) -> LedgerRun | None:
    """Record (again) the ledger of a baseline run whose report was parsed; None for any other job. A run whose
    report came after the next run's was recorded has that next run diffed again, against it."""
    run = _recorded(job_id)
    if run is not None:
        later = LedgerRun.objects.filter(
            backend_id=run.backend_id,
            workflow_name=run.workflow_name,
            job_name=run.job_name,
            finished_at__gt=run.finished_at,
        ).exclude(sha=run.sha)
        following = later.order_by("finished_at", "id").values_list("job_id", "previous_id").first()
        if following and following[1] != run.job_id:
            _recorded(following[0])
    return run


def _recorded(job_id: int) -> LedgerRun | None:
    job = JobResult.objects.filter(pk=job_id).first()
    if job is None or not is_baseline_run(job):
        return None
    if not job.test_reports.filter(state=TestReport.State.PARSED).exists():
        LedgerRun.objects.filter(job=job).delete()
        return None
    states, files = _cases(job.pk)
    entries = DisabledTest.objects.active().filter(backend_id=job.backend_id)
    disabled = verdicts.job_disabled_tests(states, entries.values_list("name", "kind", "test_name", "class_name"))
    previous = previous_run(job)
    diff = ledger_diff(_cases(previous.pk)[0], states) if previous else None
    per_file: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    totals: dict[str, int] = defaultdict(int)
    for test, status in states.items():
        counted = per_file[files[test]]
        kind = COUNTED_AS[status]
        counted["collected"] += 1
        counted["failed" if kind == "xpassed" else kind] += 1
        counted["disabled"] += test in disabled
        totals[kind] += 1
    finished: datetime = job.finished_at
    values = {
        "backend_id": job.backend_id,
        "workflow_name": job.workflow_name,
        "job_name": job.job_name,
        "sha": job.job_sha,
        "finished_at": finished,
        "day": finished.date(),
        "collected": len(states),
        "disabled": len(disabled),
        "previous": previous,
        **{kind: totals[kind] for kind in ("passed", "failed", "skipped", "xfailed", "xpassed")},
        **(diff.counts() if diff else dict.fromkeys(LedgerRun.CHANGE_KINDS, 0)),
        "changes": {kind: getattr(diff, kind)[:CAP] for kind in LedgerRun.CHANGE_KINDS} if diff else {},
    }
    with transaction.atomic():
        run, _ = LedgerRun.objects.update_or_create(job=job, defaults=values)
        LedgerFile.objects.filter(run=run).delete()
        LedgerFile.objects.bulk_create(
            LedgerFile(run=run, backend_id=job.backend_id, file=name[:500], **counted)
            for name, counted in sorted(per_file.items())
        )
    return run


def skips_started(backend_id: int, day: date) -> int:
    """Tests that started skipping in the backend's baseline runs finished on ``day`` (UTC), over all its jobs."""
    found = LedgerRun.objects.filter(backend_id=backend_id, day=day).aggregate(n=Sum("started_skipping"))["n"]
    return found or 0


def skip_alert_threshold(rule_threshold: float) -> int:
    """The alert rule's threshold, or SKIP_ALERT_TESTS when the rule leaves it at 0."""
    return int(rule_threshold) if rule_threshold > 0 else settings.SKIP_ALERT_TESTS


def latest_runs(backend_ids: list[int], *, since: datetime):
    """Each job's newest ledger run finished since ``since`` (the backend's coverage now: shards and jobs add up),
    for any number of backends, without the change lists."""
    newest = [F("finished_at").desc(), F("id").desc()]
    partition = [F("backend_id"), F("workflow_name"), F("job_name")]
    runs = LedgerRun.objects.filter(backend_id__in=backend_ids, finished_at__gte=since).defer("changes")
    return runs.annotate(n=Window(RowNumber(), partition_by=partition, order_by=newest)).filter(n=1)


class SkippedShare:
    """What a count of collected and skipped tests says: the skipped share in percent (None when none collected)."""

    collected: int
    skipped: int

    @property
    def skipped_percent(self) -> float | None:
        return round(100.0 * self.skipped / self.collected, 1) if self.collected else None


@dataclass(frozen=True)
class Totals(SkippedShare):
    runs: int = 0
    collected: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    xfailed: int = 0
    disabled: int = 0


def coverage_totals(backend_id: int, *, since: datetime) -> Totals:
    """The backend's coverage as its jobs' newest baseline runs since ``since`` give it (the readiness page's figure
    and the evidence export's, shown and never gated)."""
    runs = list(latest_runs([backend_id], since=since))
    names = ("collected", "passed", "failed", "skipped", "xfailed", "disabled")
    return Totals(len(runs), *(sum(getattr(r, name) for r in runs) for name in names))


def _cases(job_id: int) -> tuple[dict[str, str], dict[str, str]]:
    """(test id → status, test id → file) of a job's cases; a test reported twice counts once, by its last case."""
    states: dict[str, str] = {}
    files: dict[str, str] = {}
    for test, file, status in (
        TestCase.objects.filter(job_id=job_id).order_by("id").values_list("test_id", "file", "status")
    ):
        states[test] = status
        files[test] = file or (test.partition("::")[0] if "::" in test else NO_FILE)
    return states, files
