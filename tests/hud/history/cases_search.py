"""The test search as it read the cases before the daily roll-up (``hud.stores.db.history`` up to ootci 0037, and
``hud.stores.clickhouse.history`` before ``oot_test_day``): the answer the roll-up must keep giving
(tests/ootci/test_case_days.py) and the "before" of tests/bench/bench_test_history.py; and the roll-up as the cases
give it."""

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


def clickhouse_search_rows(*, text: str, since: datetime, offset: int, limit: int) -> list[dict]:
    """ClickHouse's search over every case of the window (``oot_test_case`` FINAL)."""
    from hud.stores.clickhouse import connection as clickhouse
    from hud.stores.clickhouse import history

    sql = f"""
    SELECT generic_id, if(failures > 0, maxIf(reported_at, {history.IS_FAILING}), NULL) AS last_failure,
        max(reported_at) AS last_run, countIf({history.IS_COUNTED}) AS runs, countIf({history.IS_FAILING}) AS failures
    FROM {history.TABLE} FINAL
    PREWHERE reported_at >= {history.SINCE}
    WHERE lowerUTF8(generic_id) LIKE lowerUTF8({{pattern:String}})
    GROUP BY generic_id
    ORDER BY last_failure DESC NULLS LAST, generic_id
    LIMIT {int(limit)} OFFSET {int(offset)}"""
    with clickhouse.session():
        return clickhouse.select(sql, {"pattern": f"%{history.like_escaped(text)}%", "since": since})
