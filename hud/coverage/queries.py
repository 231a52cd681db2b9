"""The coverage page (``/oot/<org>/<repo>/coverage/`` and its JSON): a backend's skip ledger (``ootci.ledger``).

- **Files**: each upstream test file in its jobs' newest baseline runs of the window — collected, passed, failed,
  skipped, xfailed, on the disabled list — beside the other shown backends that run that file and how much of it they
  skip (files only peers run are listed too: where it stands against them).
- **Skipped over time**: per day, the tests skipped by each job's newest run up to that day, summed over its jobs
  (carried forward across days without a run, so shards that run on different days do not saw-tooth).
- **Changes by day**: the diffs of its baseline runs rolled up by finish day; the test ids of one day's changes.

Reads only the ledger tables: a handful of indexed queries whatever the number of tests.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.db.models import Count, Sum
from django.utils import timezone

from hud.stores import allowlisted
from hud.stores.types import BackendInfo
from ootci import ledger
from ootci.models import LedgerFile, LedgerRun

DAYS = 90
SHOWN_IDS = 200  # test ids shown per change kind on the page (the JSON gives what the ledger keeps)
KINDS = LedgerRun.CHANGE_KINDS
LABELS = {
    "added": "Added",
    "removed": "Removed",
    "started_skipping": "Started skipping",
    "stopped_skipping": "Stopped skipping",
    "xpass": "XPASS (remove from the skip list)",
}


@dataclass(frozen=True)
class Peer(ledger.SkippedShare):
    repo: str
    collected: int
    skipped: int


@dataclass(frozen=True)
class FileRow(ledger.SkippedShare):
    file: str
    collected: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    xfailed: int = 0
    disabled: int = 0
    peers: list[Peer] = field(default_factory=list)


@dataclass(frozen=True)
class DayPoint:
    day: date
    skipped: int | None  # None before the first run
    collected: int | None
    ran: bool  # a baseline run finished that day


@dataclass(frozen=True)
class DayChanges:
    day: date
    runs: int
    added: int
    removed: int
    started_skipping: int
    stopped_skipping: int
    xpass: int


@dataclass(frozen=True)
class RunRow:
    job_id: int
    column: str
    sha: str
    finished_at: datetime
    collected: int
    skipped: int
    disabled: int
    previous_job_id: int | None


@dataclass(frozen=True)
class Coverage:
    backend: BackendInfo
    days: int
    totals: ledger.Totals
    runs: list[RunRow]
    files: list[FileRow]
    series: list[DayPoint]
    changes: list[DayChanges]  # newest first, days with runs only
    day: date | None  # the day whose test ids are listed
    tests: dict[str, list[str]]  # change kind → test ids of ``day``
    tests_total: dict[str, int]

    def changed_lists(self) -> list[tuple[str, str, list[str], int]]:
        """(kind, label, test ids shown, how many in all) of ``day``'s changes, for the page."""
        return [(k, LABELS[k], self.tests.get(k, []), self.tests_total.get(k, 0)) for k in KINDS]


def coverage(info: BackendInfo, *, day: date | None = None, now: datetime | None = None, cap: int = SHOWN_IDS):
    now = now or timezone.now()
    since = now - timedelta(days=DAYS)
    peers = {b.id: b.repo for b in allowlisted.shown() if b.id != info.id}
    latest = list(ledger.latest_runs([info.id, *peers], since=since))
    mine = [r for r in latest if r.backend_id == info.id]
    runs = [
        RunRow(
            r.job_id,
            f"{r.workflow_name} / {r.job_name}",
            r.sha,
            r.finished_at,
            r.collected,
            r.skipped,
            r.disabled,
            r.previous_id,
        )
        for r in sorted(mine, key=lambda r: (r.workflow_name, r.job_name))
    ]
    names = ("collected", "passed", "failed", "skipped", "xfailed", "disabled")
    totals = ledger.Totals(len(mine), *(sum(getattr(r, n) for r in mine) for n in names))
    changes = _changes(info.id, since=since)
    day = day or (changes[0].day if changes else None)
    tests, tests_total = _tests_of(info.id, day, cap=cap) if day else ({}, {})
    return Coverage(
        backend=info,
        days=DAYS,
        totals=totals,
        runs=runs,
        files=_files(info.id, latest, peers),
        series=_series(info.id, since=since, now=now),
        changes=changes,
        day=day,
        tests=tests,
        tests_total=tests_total,
    )


def _files(backend_id: int, latest: list[LedgerRun], peers: dict[int, str]) -> list[FileRow]:
    sums = {n: Sum(n) for n in ("collected", "passed", "failed", "skipped", "xfailed", "disabled")}
    rows = LedgerFile.objects.filter(run_id__in=[r.pk for r in latest]).values("backend_id", "file").annotate(**sums)
    mine: dict[str, dict] = {}
    others: dict[str, list[Peer]] = defaultdict(list)
    for r in rows:
        if r["backend_id"] == backend_id:
            mine[r["file"]] = r
        elif r["backend_id"] in peers:
            others[r["file"]].append(Peer(peers[r["backend_id"]], r["collected"], r["skipped"]))
    found = []
    for name in sorted(mine.keys() | others.keys()):
        counts = {k: v for k, v in mine.get(name, {}).items() if k not in ("backend_id", "file")}
        found.append(FileRow(name, **counts, peers=sorted(others.get(name, []), key=lambda p: p.repo)))
    return found


def _series(backend_id: int, *, since: datetime, now: datetime) -> list[DayPoint]:
    runs = LedgerRun.objects.filter(backend_id=backend_id, finished_at__gte=since).order_by("finished_at", "id")
    by_day: dict[date, list[tuple]] = defaultdict(list)
    for row in runs.values_list("day", "workflow_name", "job_name", "skipped", "collected"):
        by_day[row[0]].append(row[1:])
    current: dict[tuple[str, str], tuple[int, int]] = {}
    points = []
    first = since.date()
    for i in range((now.date() - first).days + 1):
        day = first + timedelta(days=i)
        for workflow, job, skipped, collected in by_day.get(day, []):
            current[workflow, job] = (skipped, collected)
        if current:
            skipped = sum(v[0] for v in current.values())
            points.append(DayPoint(day, skipped, sum(v[1] for v in current.values()), day in by_day))
        else:
            points.append(DayPoint(day, None, None, False))
    return points


def _changes(backend_id: int, *, since: datetime) -> list[DayChanges]:
    runs = LedgerRun.objects.filter(backend_id=backend_id, finished_at__gte=since, previous__isnull=False)
    rows = runs.values("day").annotate(runs=Count("pk"), **{k: Sum(k) for k in KINDS}).order_by("-day")
    return [DayChanges(**r) for r in rows]


def _tests_of(backend_id: int, day: date, *, cap: int) -> tuple[dict[str, list[str]], dict[str, int]]:
    tests: dict[str, list[str]] = {k: [] for k in KINDS}
    totals = dict.fromkeys(KINDS, 0)
    for changes, *counts in LedgerRun.objects.filter(backend_id=backend_id, day=day).values_list("changes", *KINDS):
        for kind, n in zip(KINDS, counts, strict=True):
            totals[kind] += n
            tests[kind] += (changes or {}).get(kind, [])
    return {k: sorted(set(v))[:cap] for k, v in tests.items()}, totals


def readiness_coverage(backend_id: int, *, now: datetime | None = None) -> ledger.Totals:
    """The readiness page's coverage figure (shown, never gated): its jobs' newest baseline runs over 90 days."""
    return ledger.coverage_totals(backend_id, since=(now or timezone.now()) - timedelta(days=DAYS))
