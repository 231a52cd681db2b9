"""Per-test results for the HUD pages and API: a job's parsed test reports and its failing cases, and the first
failing tests of each job of a PR. Read from PostgreSQL (ootci's TestReport/TestCase), where every failing case is;
hud.figures.queries is the interface the views use."""

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Window
from django.db.models.functions import RowNumber

from ootci.models import TestCase, TestReport

# A message longer than this (or than FOLD_LINES lines) is shown folded on the job page.
FOLD_CHARS = 300
FOLD_LINES = 4


@dataclass(frozen=True)
class ReportInfo:
    id: int
    source: str
    state: str
    reason: str
    cases: int
    passed: int
    failed: int
    errors: int
    skipped: int
    xfailed: int
    xpassed: int
    reruns: int
    duration: float
    received_at: datetime
    parsed_at: datetime | None


@dataclass(frozen=True)
class CaseInfo:
    test_id: str
    file: str
    classname: str
    name: str
    status: str
    duration: float
    reruns: int
    message: str

    @property
    def folded(self) -> bool:
        return folded(self.message)

    @property
    def first_line(self) -> str:
        return first_line(self.message)


def folded(message: str) -> bool:
    """Whether a failure message is shown folded (its first line as the summary)."""
    return len(message) > FOLD_CHARS or message.count("\n") >= FOLD_LINES


def first_line(message: str) -> str:
    return message.split("\n", 1)[0][:FOLD_CHARS]


@dataclass(frozen=True)
class JobTests:
    reports: list[ReportInfo]
    failing: list[CaseInfo]  # failed, error, xpass: every one
    flaky: list[CaseInfo] = field(default_factory=list)  # passed after reruns

    @property
    def parsed(self) -> bool:
        return any(r.state == TestReport.State.PARSED for r in self.reports)


CASE_FIELDS = ["test_id", "file", "classname", "name", "status", "duration", "reruns", "message"]
REPORT_FIELDS = [f.name for f in ReportInfo.__dataclass_fields__.values()]


def job_tests(job_id: int) -> JobTests:
    reports = [
        ReportInfo(**row) for row in TestReport.objects.filter(job_id=job_id).order_by("id").values(*REPORT_FIELDS)
    ]
    if not reports:
        return JobTests([], [])
    cases = TestCase.objects.filter(job_id=job_id).order_by("id")
    failing = [CaseInfo(**row) for row in cases.filter(status__in=TestCase.FAILING).values(*CASE_FIELDS)]
    flaky = [CaseInfo(**row) for row in cases.filter(status=TestCase.Status.PASSED, reruns__gt=0).values(*CASE_FIELDS)]
    return JobTests(reports, failing, flaky)


def first_failing(job_ids: list[int], *, per_job: int) -> dict[int, list[CaseInfo]]:
    """The first ``per_job`` failing cases of each job (report order), for the PR page: one query that reads only
    those (a job may have thousands)."""
    if not job_ids:
        return {}
    found: dict[int, list[CaseInfo]] = {}
    rows = (
        TestCase.objects.filter(job_id__in=job_ids, status__in=TestCase.FAILING)
        .annotate(n=Window(RowNumber(), partition_by="job_id", order_by="id"))
        .filter(n__lte=per_job)
        .order_by("job_id", "id")
    )
    for row in rows.values("job_id", *CASE_FIELDS):
        found.setdefault(row.pop("job_id"), []).append(CaseInfo(**row))
    return found
