"""The failing-tests case store on the database: TestCase (every case, passes included), and each test's last results
on its backend (TestRecent, ``ootci.case_recent``) as its history.

Rows as ``hud.stores.base.CaseRows`` describes them: a case's order within its report is its id (cases are written in
report order), its time the report's ``received_at``. With ClickHouse configured the database answers these reads too
(``hud.failing.queries.case_store``).
"""

from __future__ import annotations

from hud.stores.base import CASE_FAILING as FAILING
from ootci import case_recent
from ootci.models import TestCase


class DatabaseCases:
    def failing_cases(self, *, job_ids: list[int]) -> list[dict]:
        rows = TestCase.objects.filter(job_id__in=job_ids, status__in=FAILING).order_by("job_id", "report_id", "id")
        return list(rows.values("job_id", "test_id", "status", "reruns", "message"))

    def cases_of(self, *, job_ids: list[int], test_ids: list[str]) -> list[dict]:
        rows = TestCase.objects.filter(job_id__in=job_ids, test_id__in=test_ids).order_by()
        return list(rows.values("job_id", "test_id", "status", "reruns"))

    def history(self, *, tests: dict[int, list[str]], limit: int) -> dict[tuple[int, str], list[dict]]:
        # Kept per (backend, test) as reports are parsed (TestRecent, ``ootci.case_recent``): a read by key, where
        # the cases themselves cost one index range per test over every backend's results (70 ms for a PR page of 12
        # failing backends at 1,000,000 cases).
        return case_recent.recent_rows(tests, limit=limit)
