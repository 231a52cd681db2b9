"""The test search as it read the cases before the daily roll-up (``hud.stores.db.history`` up to ootci 0037): the
answer the roll-up must keep giving (tests/ootci/test_case_days.py) and the "before" of
tests/bench/bench_test_history.py; and the roll-up as the cases give it."""

from datetime import datetime

from django.db.models import Count, F, Max, Q

from hud.stores.base import CASE_COUNTED, CASE_FAILING
from hud.stores.db.history import by_code_point, cases_since
from ootci.case_days import day_of
from ootci.models import TestCase, TestDay, TestReport


def search_rows(*, text: str, since: datetime, offset: int, limit: int) -> list[dict]:
    failing = Q(status__in=CASE_FAILING)
    rows = (
        cases_since(since)
        .filter(test_id__icontains=text)
        .values("test_id")
        .annotate(
            last_failure=Max("report__received_at", filter=failing),
            last_run=Max("report__received_at"),
            runs=Count("id", filter=Q(status__in=CASE_COUNTED)),
            failures=Count("id", filter=failing),
        )
        .order_by(F("last_failure").desc(nulls_last=True), by_code_point("test_id"))
    )
    return [r | {"generic_id": r.pop("test_id")} for r in rows[offset : offset + limit]]


def days_from_cases() -> set[tuple]:
    """The daily roll-up (TestDay) as the cases of the parsed reports give it, counted here in Python: (test_id, day,
    runs, failures, last_run, last_failure)."""
    days: dict[tuple, list] = {}
    cases = TestCase.objects.filter(report__state=TestReport.State.PARSED).values_list(
        "test_id", "status", "report__received_at"
    )
    for test_id, status, at in cases:
        row = days.setdefault((test_id, day_of(at)), [0, 0, at, None])
        row[0] += status in CASE_COUNTED
        row[1] += status in CASE_FAILING
        row[2] = max(row[2], at)
        if status in CASE_FAILING:
            row[3] = max(row[3] or at, at)
    return {(*key, *row) for key, row in days.items()}


def days_rolled_up() -> set[tuple]:
    return set(TestDay.objects.values_list("test_id", "day", "runs", "failures", "last_run", "last_failure"))
