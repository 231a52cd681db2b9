"""Per-test history: the test search and the test page, assembled once from the rows of either store.

A test is its generic id (``TestCase.test_id``, ``oot_test_case.generic_id``: file::Class::name with the device made
generic), so one test is the same row on every backend. Its **results** are its cases in parsed reports whose report
arrived in the window (``TestReport.received_at``, ClickHouse's ``reported_at``: the one time both stores keep for a
case), oldest first by (arrival, report, position in the report).

- **Counted** results are passes and failures (failed, error, strict xpass); skipped and xfail are shown, not counted.
  **Pass rate** = passes ÷ counted results, every result (re-runs included), over the window.
- **Grid**: a column per tested upstream SHA (and PR number when the job was a PR's), newest first, the newest
  ``COLUMNS``; a cell is the latest result of the test on that backend and SHA, lettered as the matrix letters a job
  (``CELLS``), with how many results that SHA had (re-runs, or several jobs running the test) and the pytest reruns
  of the latest one.
- **Started failing**: when a backend's latest counted result fails, its first failure after its last pass (or its
  first failure in the window when no pass is in it: "never passed in the window"); None when the latest passes.
- **Search**: tests whose generic id contains the text (any case) with a result in the window, those that failed
  most recently first, then the rest by id; ``PER_PAGE`` a page.

The rows come from a store (``test_history_db`` on PostgreSQL/SQLite, ``test_history_clickhouse`` on ClickHouse, the
database answering when ClickHouse fails, as for the job figures); both return the same rows on the same data
(tests/hud/history/test_parity.py). ``hud.figures.queries`` is the interface the views use.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from hud.history import results
from hud.stores.base import CASE_COUNTED as COUNTED
from hud.stores.base import CASE_FAILING as FAILING
from hud.stores.base import HistoryRows, as_datetime
from hud.stores.types import BackendInfo, rate

PER_PAGE = 50
MIN_QUERY = 3  # shorter text would match most tests: the search asks for more instead of scanning for it
MAX_QUERY = 200
MAX_ID = 1000  # TestCase.test_id's length
COLUMNS = 30
# A result's letter and cell class, as the backend matrix letters and colours a job (hud.templatetags.hud.letter).
CELLS = {
    "passed": ("O", "success"),
    "failed": ("X", "test"),
    "xpass": ("X", "test"),
    "error": ("X", "infra"),
    "skipped": ("S", "skipped"),
    "xfail": ("N", "skipped"),
}
STATUS_TEXT = {"xpass": "unexpectedly passed (strict)", "xfail": "expected failure"}


# --- search ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    generic_id: str
    last_failure: datetime | None
    last_run: datetime
    runs: int
    failures: int

    @property
    def pass_rate(self) -> float | None:
        return rate(self.runs - self.failures, self.runs)


@dataclass(frozen=True)
class SearchPage:
    text: str
    days: int
    hits: list[Hit]
    page: int
    has_next: bool


def query_problem(text: str) -> str:
    """Why ``text`` is not searched ("" when it is)."""
    if len(text) < MIN_QUERY:
        return f"Type at least {MIN_QUERY} characters of a test id."
    if len(text) > MAX_QUERY:
        return f"A search is at most {MAX_QUERY} characters."
    if "\x00" in text:
        return "A test id holds no NUL character."
    return ""


def possible_id(generic_id: str) -> bool:
    """Whether a test could have this id (XML holds no NUL; TestCase.test_id holds at most MAX_ID characters)."""
    return len(generic_id) <= MAX_ID and "\x00" not in generic_id


def search(rows: HistoryRows, *, text: str, days: int, since: datetime, page: int) -> SearchPage:
    """A page of the tests whose generic id contains ``text`` (see the module docstring); ``text`` must pass
    ``query_problem``."""
    found = rows.search_rows(text=text, since=since, offset=(page - 1) * PER_PAGE, limit=PER_PAGE + 1)
    hits = [
        Hit(
            generic_id=r["generic_id"],
            last_failure=as_datetime(r["last_failure"]),
            last_run=as_datetime(r["last_run"]),
            runs=int(r["runs"]),
            failures=int(r["failures"]),
        )
        for r in found[:PER_PAGE]
    ]
    return SearchPage(text=text, days=days, hits=hits, page=page, has_next=len(found) > PER_PAGE)


# --- the test page --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    backend_id: int
    job_id: int
    event_type: str
    pr_number: int | None
    sha: str
    status: str
    reruns: int
    at: datetime
    report_id: int


@dataclass(frozen=True)
class Column:
    pr_number: int | None
    sha: str
    at: datetime  # its latest result


@dataclass(frozen=True)
class Cell:
    job_id: int
    sha: str
    status: str
    reruns: int  # pytest reruns of the latest result
    results: int  # results of the test on this backend and SHA

    @property
    def letter(self) -> str:
        return CELLS.get(self.status, ("U", "infra"))[0]

    @property
    def outcome(self) -> str:
        return CELLS.get(self.status, ("U", "infra"))[1]

    @property
    def status_text(self) -> str:
        return STATUS_TEXT.get(self.status, self.status)


@dataclass(frozen=True)
class Moment:
    """A result as the page names it: its job, upstream SHA and PR, and when its report arrived."""

    job_id: int
    sha: str
    pr_number: int | None
    event_type: str
    at: datetime


@dataclass(frozen=True)
class StartedFailing:
    first: Moment  # the first failure of the current run of failures
    after_pass: bool  # False: no pass in the window ("never passed in the window")
    failures: int  # failing results since then


@dataclass(frozen=True)
class LastFailure:
    moment: Moment
    status: str
    message: str

    @property
    def folded(self) -> bool:
        return results.folded(self.message)

    @property
    def first_line(self) -> str:
        return results.first_line(self.message)


@dataclass(frozen=True)
class BackendHistory:
    backend: BackendInfo
    cells: list[Cell | None]  # one per column
    passed: int
    failed: int
    skipped: int  # skipped and xfail
    started_failing: StartedFailing | None
    last_failure: LastFailure | None

    @property
    def runs(self) -> int:
        return self.passed + self.failed

    @property
    def pass_rate(self) -> float | None:
        return rate(self.passed, self.runs)


@dataclass(frozen=True)
class TestHistory:
    __test__ = False  # not a pytest class

    generic_id: str
    days: int
    columns: list[Column]
    backends: list[BackendHistory]  # failing now first, then by repo


def history(
    rows: HistoryRows, *, generic_id: str, days: int, since: datetime, backends: list[BackendInfo]
) -> TestHistory:
    """The test page of ``generic_id`` over the window (see the module docstring): only ``backends`` are shown."""
    shown = {b.id: b for b in backends}
    found = rows.history_rows(generic_id=generic_id, since=since)
    results = [Result(**r | {"at": as_datetime(r["at"])}) for r in found if r["backend_id"] in shown]
    columns = grid_columns(results)
    by_backend: dict[int, list[Result]] = {}
    for r in results:
        by_backend.setdefault(r.backend_id, []).append(r)
    last_failing = {bid: last_failing_result(found) for bid, found in by_backend.items()}
    wanted = sorted({r.report_id for r in last_failing.values() if r is not None})
    messages = rows.failure_messages(generic_id=generic_id, report_ids=wanted) if wanted else {}
    histories = [
        backend_history(shown[bid], found, columns, last_failing[bid], messages) for bid, found in by_backend.items()
    ]
    histories.sort(key=lambda h: (h.started_failing is None, h.backend.repo.lower()))
    return TestHistory(generic_id=generic_id, days=days, columns=columns, backends=histories)


def grid_columns(results: list[Result]) -> list[Column]:
    """The tested (PR, SHA) pairs, the newest ``COLUMNS`` by their latest result (then by SHA)."""
    latest: dict[tuple, datetime] = {}
    for r in results:
        key = (r.pr_number, r.sha)
        latest[key] = max(latest.get(key, r.at), r.at)
    ordered = sorted(latest.items(), key=lambda item: (-item[1].timestamp(), item[0][1], item[0][0] or 0))
    return [Column(pr_number=pr, sha=sha, at=at) for (pr, sha), at in ordered[:COLUMNS]]


def backend_history(
    backend: BackendInfo,
    results: list[Result],
    columns: list[Column],
    last_failing: Result | None,
    messages: dict[int, str],
) -> BackendHistory:
    statuses = Counter(r.status for r in results)
    last = None
    if last_failing is not None:
        last = LastFailure(moment(last_failing), last_failing.status, messages.get(last_failing.report_id, ""))
    return BackendHistory(
        backend=backend,
        cells=cells(results, columns),
        passed=statuses["passed"],
        failed=sum(statuses[s] for s in FAILING),
        skipped=statuses["skipped"] + statuses["xfail"],
        started_failing=started_failing(results),
        last_failure=last,
    )


def cells(results: list[Result], columns: list[Column]) -> list[Cell | None]:
    """Per column, the latest of ``results`` (oldest first) at its PR and SHA, with how many there were."""
    at_sha: dict[tuple, list[Result]] = {}
    for r in results:
        at_sha.setdefault((r.pr_number, r.sha), []).append(r)
    found: list[Cell | None] = []
    for column in columns:
        here = at_sha.get((column.pr_number, column.sha))
        latest = here[-1] if here else None
        found.append(latest and Cell(latest.job_id, latest.sha, latest.status, latest.reruns, len(here or ())))
    return found


def started_failing(results: list[Result]) -> StartedFailing | None:
    """The first failure after the last pass when the latest counted result fails (see the module docstring)."""
    counted = [r for r in results if r.status in COUNTED]
    if not counted or counted[-1].status not in FAILING:
        return None
    first = len(counted) - 1
    while first > 0 and counted[first - 1].status in FAILING:
        first -= 1
    return StartedFailing(moment(counted[first]), after_pass=first > 0, failures=len(counted) - first)


def last_failing_result(results: list[Result]) -> Result | None:
    return next((r for r in reversed(results) if r.status in FAILING), None)


def moment(r: Result) -> Moment:
    return Moment(job_id=r.job_id, sha=r.sha, pr_number=r.pr_number, event_type=r.event_type, at=r.at)
