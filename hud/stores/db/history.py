"""The per-test rows of ``hud.history.assembly`` from the Django database: TestCase (every case, passes included) with
its report's arrival time and its job's event, PR and tested SHA.

The search reads the daily roll-up per test (TestDay, kept as reports are parsed: ``ootci.case_days``) for the days
wholly in the window, and the cases only for the part of the window's first day that the window holds (a window is
``days`` × 24 hours back from now), then adds the two up per test: a search matching nearly every test reads a row
per test and day, not every case. Both are ``icontains`` on the id; on PostgreSQL trigram indexes (migrations ootci
0010 and 0037) answer it without reading every row. Ids are ordered by code point (``COLLATE "C"`` on PostgreSQL,
SQLite's default), as ClickHouse orders strings, so both stores page alike.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count, F, Max, Q
from django.db.models.functions import Collate

from hud.stores.base import CASE_COUNTED as COUNTED
from hud.stores.base import CASE_FAILING as FAILING
from ootci.case_days import day_of, day_start
from ootci.models import TestCase, TestDay, TestReport


def cases_since(since: datetime):
    return TestCase.objects.filter(report__state=TestReport.State.PARSED, report__received_at__gte=since)


def by_code_point(field: str):
    """``field`` for ORDER BY in code-point order."""
    return Collate(F(field), "C") if connection.vendor == "postgresql" else F(field)


SUMMED = ("test_id", "last_failure", "last_run", "runs", "failures")
# The roll-up's rows and the cases' rows of the search, added up per test (the columns of HistoryRows.search_rows).
SEARCH = """
SELECT test_id AS generic_id, MAX(last_failure) AS last_failure, MAX(last_run) AS last_run, SUM(runs) AS runs,
       SUM(failures) AS failures
FROM ({parts}) AS found
GROUP BY test_id
ORDER BY MAX(last_failure) DESC NULLS LAST, test_id{collate}
LIMIT %s OFFSET %s
"""


class DatabaseStore:
    def search_rows(self, *, text: str, since: datetime, offset: int, limit: int) -> list[dict]:
        whole_days = day_start(day_of(since - timedelta(microseconds=1)) + timedelta(days=1))  # the first at or after
        parts = [TestDay.objects.filter(day__gte=whole_days.date(), test_id__icontains=text).values(*SUMMED)]
        # The reports of the first day's part, by id: a join on their arrival lets the planner read every case.
        first_day = TestReport.objects.filter(
            state=TestReport.State.PARSED, received_at__gte=since, received_at__lt=whole_days
        )
        if reports := list(first_day.order_by().values_list("pk", flat=True)):
            failing = Q(status__in=FAILING)
            parts.append(
                TestCase.objects.filter(report_id__in=reports, test_id__icontains=text)
                .values("test_id")
                .annotate(
                    last_failure=Max("report__received_at", filter=failing),
                    last_run=Max("report__received_at"),
                    runs=Count("id", filter=Q(status__in=COUNTED)),
                    failures=Count("id", filter=failing),
                )
            )
        compiled = [part.order_by().query.sql_with_params() for part in parts]
        union = " UNION ALL ".join(f"SELECT {', '.join(SUMMED)} FROM ({sql}) AS part" for sql, _ in compiled)
        collate = ' COLLATE "C"' if connection.vendor == "postgresql" else ""
        with connection.cursor() as cursor:
            params = [p for _, part_params in compiled for p in part_params]
            cursor.execute(SEARCH.format(parts=union, collate=collate), (*params, limit, offset))
            names = [c[0] for c in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def history_rows(self, *, generic_id: str, since: datetime) -> list[dict]:
        rows = (
            cases_since(since)
            .filter(test_id=generic_id)
            .order_by("report__received_at", "report_id", "id")
            .values(
                "job_id",
                "status",
                "reruns",
                "report_id",
                backend_id=F("job__backend_id"),
                event_type=F("job__event_type"),
                pr_number=F("job__pr_number"),
                sha=F("job__job_sha"),
                at=F("report__received_at"),
            )
        )
        return list(rows)

    def failure_messages(self, *, generic_id: str, report_ids: list[int]) -> dict[int, str]:
        rows = TestCase.objects.filter(test_id=generic_id, report_id__in=report_ids, status__in=FAILING)
        return dict(rows.order_by("id").values_list("report_id", "message"))  # the last case of a report wins
