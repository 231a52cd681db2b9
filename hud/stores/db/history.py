"""The per-test rows of ``hud.history.assembly`` from the Django database: TestCase (every case, passes included) with
its report's arrival time and its job's event, PR and tested SHA.

The search is ``icontains`` on ``test_id``; on PostgreSQL a trigram index (migration ootci 0009) answers it without
reading every case. Ids are ordered by code point (``COLLATE "C"`` on PostgreSQL, SQLite's default), as ClickHouse
orders strings, so both stores page alike.
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.db.models import Count, F, Max, Q
from django.db.models.functions import Collate

from hud.stores.base import CASE_COUNTED as COUNTED
from hud.stores.base import CASE_FAILING as FAILING
from ootci.models import TestCase, TestReport


def cases_since(since: datetime):
    return TestCase.objects.filter(report__state=TestReport.State.PARSED, report__received_at__gte=since)


def by_code_point(field: str):
    """``field`` for ORDER BY in code-point order."""
    return Collate(F(field), "C") if connection.vendor == "postgresql" else F(field)


class DatabaseStore:
    def search_rows(self, *, text: str, since: datetime, offset: int, limit: int) -> list[dict]:
        failing = Q(status__in=FAILING)
        rows = (
            cases_since(since)
            .filter(test_id__icontains=text)
            .values("test_id")
            .annotate(
                last_failure=Max("report__received_at", filter=failing),
                last_run=Max("report__received_at"),
                runs=Count("id", filter=Q(status__in=COUNTED)),
                failures=Count("id", filter=failing),
            )
            .order_by(F("last_failure").desc(nulls_last=True), by_code_point("test_id"))
        )
        return [r | {"generic_id": r.pop("test_id")} for r in rows[offset : offset + limit]]

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
