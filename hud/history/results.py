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


CASES_PAGE = 200  # failing cases a job page or its JSON shows at a time (a broken device can fail 200,000)


@dataclass(frozen=True)
class JobTests:
    reports: list[ReportInfo]
    failing: list[CaseInfo]  # failed, error, xpass: a page of CASES_PAGE, in report order
    flaky: list[CaseInfo] = field(default_factory=list)  # passed after reruns: the first CASES_PAGE
    failing_total: int = 0
    flaky_total: int = 0
    next_after: int | None = None  # the cursor of the next page of failing cases (None: this is the last)

    @property
    def parsed(self) -> bool:
        return any(r.state == TestReport.State.PARSED for r in self.reports)


CASE_FIELDS = ["test_id", "file", "classname", "name", "status", "duration", "reruns", "message"]
REPORT_FIELDS = [f.name for f in ReportInfo.__dataclass_fields__.values()]


def job_tests(job_id: int, *, after: int = 0) -> JobTests:
    """The job's reports, a page of its failing cases (those after the case id ``after``, in report order) with the
    count of all, and its first flaky cases with theirs."""
    reports = [
        ReportInfo(**row) for row in TestReport.objects.filter(job_id=job_id).order_by("id").values(*REPORT_FIELDS)
    ]
    if not reports:
        return JobTests([], [])
    cases = TestCase.objects.filter(job_id=job_id).order_by("id")
    failing_all = cases.filter(status__in=TestCase.FAILING)
    rows = list(failing_all.filter(id__gt=after).values("id", *CASE_FIELDS)[: CASES_PAGE + 1])
    more = len(rows) > CASES_PAGE
    rows = rows[:CASES_PAGE]
    failing = [CaseInfo(**{k: v for k, v in row.items() if k != "id"}) for row in rows]
    flaky_all = cases.filter(status=TestCase.Status.PASSED, reruns__gt=0)
    flaky = [CaseInfo(**row) for row in flaky_all.values(*CASE_FIELDS)[:CASES_PAGE]]
    total = failing_all.count() if more or after else len(failing)
    flaky_total = flaky_all.count() if len(flaky) == CASES_PAGE else len(flaky)
    return JobTests(reports, failing, flaky, total, flaky_total, rows[-1]["id"] if more else None)


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
