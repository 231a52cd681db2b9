"""The per-test views' reads (pages and JSON API): the test search and one test across backends
(``hud.history.assembly``), and a job's parsed test reports (``hud.history.results``)."""

from __future__ import annotations

from datetime import datetime

from hud.history import assembly, results
from hud.stores import allowlisted
from hud.stores.base import HistoryRows, since
from hud.stores.clickhouse.history import ClickHouseStore as HistoryClickHouse
from hud.stores.db.history import DatabaseStore as HistoryDatabase
from hud.stores.fallback import FallbackHistory, clickhouse_failed, source


def rows() -> HistoryRows:
    """The per-test rows, from the store ``hud.figures.queries.store`` would pick."""
    if source() != "clickhouse":
        return HistoryDatabase()
    return FallbackHistory(HistoryClickHouse(), HistoryDatabase(), failed=clickhouse_failed)


def search(*, text: str, days: int, page: int, now: datetime | None = None) -> assembly.SearchPage:
    """Tests whose generic id contains ``text`` (any case), failing most recently first (hud.history.assembly)."""
    return assembly.search(rows(), text=text, days=days, since=since(days, now), page=page)


def page(*, generic_id: str, days: int, now: datetime | None = None) -> assembly.TestHistory:
    """One test across the shown backends: grid, when it started failing, last failure, pass rate
    (hud.history.assembly)."""
    return assembly.history(
        rows(), generic_id=generic_id, days=days, since=since(days, now), backends=allowlisted.shown()
    )


def job_tests(*, job_id: int, after: int = 0) -> results.JobTests:
    """A job attempt's reports and a page of its failing cases, those after case ``after`` (hud.history.results)."""
    return results.job_tests(job_id, after=after)


def first_failing_tests(job_ids: list[int], *, per_job: int) -> dict[int, list[results.CaseInfo]]:
    """The first failing tests of each job, with their messages, from its parsed report (jobs without one: absent)."""
    return results.first_failing(job_ids, per_job=per_job)
