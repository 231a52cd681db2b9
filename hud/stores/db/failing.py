"""The failing-tests case store on the database: TestCase (every case, passes included) joined to its report and job.

Rows as ``hud.failing.classes.CaseStore`` describes them, the same as ``hud.stores.clickhouse.failing`` gives on the
same data: a case's order within its report is its id (cases are written in report order), its time the report's
``received_at``.
"""

from __future__ import annotations

from django.db.models import CharField, F, Value, Window
from django.db.models.functions import Cast, Concat, RowNumber

from hud.stores.base import CASE_COUNTED as COUNTED
from hud.stores.base import CASE_FAILING as FAILING
from hud.stores.base import as_datetime
from ootci.models import TestCase
from ootci.verdicts import BASELINE_EVENTS as BASELINE

TEXT = CharField()


class DatabaseCases:
    def failing_cases(self, *, job_ids: list[int]) -> list[dict]:
        rows = TestCase.objects.filter(job_id__in=job_ids, status__in=FAILING).order_by("job_id", "report_id", "id")
        return list(rows.values("job_id", "test_id", "status", "reruns", "message"))

    def cases_of(self, *, job_ids: list[int], test_ids: list[str]) -> list[dict]:
        rows = TestCase.objects.filter(job_id__in=job_ids, test_id__in=test_ids).order_by()
        return list(rows.values("job_id", "test_id", "status", "reruns"))

    def history(self, *, tests: dict[int, list[str]], limit: int) -> list[dict]:
        if not tests:
            return []
        newest = [F("report__received_at").desc(), F("report_id").desc(), F("id").desc()]
        # One list of tests (read from the test_id index) and the (backend, test) pairs as a filter on the joined
        # rows: an OR of a backend and its tests per backend makes PostgreSQL OR one bitmap per backend and fetch
        # every case of every listed test from the table (0.7 s for 12 backends on a PR page, 1 million cases).
        wanted = sorted({test for ids in tests.values() for test in ids})
        pairs = [f"{backend_id}:{test}" for backend_id, ids in tests.items() for test in ids]
        rows = (
            TestCase.objects.filter(test_id__in=wanted, job__backend_id__in=list(tests), status__in=COUNTED)
            .filter(job__event_type__in=BASELINE)  # ootci.verdicts: the backend's own runs, not other PRs'
            .annotate(pair=Concat(Cast("job__backend_id", CharField()), Value(":"), "test_id", output_field=TEXT))
            .filter(pair__in=pairs)
            .annotate(
                backend_id=F("job__backend_id"),
                job_sha=F("job__job_sha"),
                at=F("report__received_at"),
                n=Window(RowNumber(), partition_by=[F("job__backend_id"), F("test_id")], order_by=newest),
            )
            .filter(n__lte=limit)
            .order_by("backend_id", "test_id", *newest)
        )
        found = rows.values("backend_id", "test_id", "status", "reruns", "job_id", "job_sha", "at")
        return [r | {"at": as_datetime(r["at"])} for r in found]
