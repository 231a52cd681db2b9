"""The test search's daily roll-up (``ootci.models.TestDay``): per test and day (UTC) of report arrival, over every
backend, the counted results, failures, latest result and latest failure of the cases of the parsed reports.

It changes in the transaction that changes which cases count, so it always equals them:

- a report parsed (``relay.reports.pull``: only ever from pending) adds its cases to its day's rows in one upsert,
  whatever that day already holds (``case_days_add``);
- parsed reports taken back (a re-parse marks them pending, ``relay.reports.reparse``; a job deleted in the admin
  takes its reports' cases along) have their tests' rows of their days counted again from the cases that still count
  (``case_days_keys`` before, ``case_days_recount`` after).

A report enters the parsed state once per parse and leaves it once, so its cases count once. On PostgreSQL both take
a transaction lock per day (SQLite writes one transaction at a time): a recount reads the day's cases, and a report of
that day added meanwhile would otherwise be missed or counted twice; parses of one day update the same rows anyway.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta

from django.db import connection, transaction
from django.db.models import Count, Max, Q

from ootci.models import TestCase, TestDay, TestReport

LOCK_CLASS = 37  # pg_advisory_xact_lock's first key: the migration that made the table, apart from other locks
BATCH = 2000
COUNTED = (TestCase.Status.PASSED, *TestCase.FAILING)


def _in(statuses: Iterable[str]) -> str:
    return "(" + ", ".join(f"'{s}'" for s in statuses) + ")"


# A report's cases as rows of its day, added to what the day holds: counts add up, the latest times win.
ADD = f"""
INSERT INTO ootci_testday (test_id, day, runs, failures, last_run, last_failure)
SELECT test_id, %(day)s, SUM(CASE WHEN status IN {_in(COUNTED)} THEN 1 ELSE 0 END),
       SUM(CASE WHEN status IN {_in(TestCase.FAILING)} THEN 1 ELSE 0 END), %(at)s,
       CASE WHEN SUM(CASE WHEN status IN {_in(TestCase.FAILING)} THEN 1 ELSE 0 END) > 0 THEN %(at)s END
FROM ootci_testcase
WHERE report_id = %(report)s
GROUP BY test_id
ORDER BY test_id
ON CONFLICT (test_id, day) DO UPDATE SET
    runs = ootci_testday.runs + excluded.runs,
    failures = ootci_testday.failures + excluded.failures,
    last_run = CASE WHEN ootci_testday.last_run >= excluded.last_run THEN ootci_testday.last_run
               ELSE excluded.last_run END,
    last_failure = CASE WHEN excluded.last_failure IS NULL OR ootci_testday.last_failure >= excluded.last_failure
                   THEN ootci_testday.last_failure ELSE excluded.last_failure END
"""


def day_of(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def case_days_add(report: TestReport) -> None:
    """Add the cases of ``report``, just parsed, to its day's rows (in the parse's transaction)."""
    day = day_of(report.received_at)
    with transaction.atomic():
        _lock([day])
        params = {
            "day": connection.ops.adapt_datefield_value(day),
            "at": connection.ops.adapt_datetimefield_value(report.received_at),
            "report": report.pk,
        }
        with connection.cursor() as cursor:
            cursor.execute(ADD, params)


def case_days_keys(report_ids: list[int]) -> dict[date, set[str]]:
    """The rows the cases of these reports count in: day → test ids (read before they stop counting)."""
    keys: dict[date, set[str]] = defaultdict(set)
    rows = TestCase.objects.filter(report_id__in=report_ids).values_list("report__received_at", "test_id").distinct()
    for at, test_id in rows.order_by().iterator(chunk_size=BATCH):
        keys[day_of(at)].add(test_id)
    return dict(keys)


def case_days_recount(keys: dict[date, set[str]]) -> None:
    """Count these rows (day → test ids) again from the cases of the parsed reports (in the transaction that changed
    which cases count, after the change)."""
    with transaction.atomic():
        _lock(keys)
        for day, tests in sorted(keys.items()):
            for chunk in _chunks(sorted(tests)):
                day_recount(TestCase, TestDay, day=day, tests=chunk)


def day_recount(case_model, day_model, *, day: date, tests: list[str] | None = None) -> None:
    """Replace the rows of ``day`` (those of ``tests`` only, when given) by the counts of the cases of the parsed
    reports that arrived that day. Takes the models so that the migration filling the table runs it with its own."""
    rows = day_model.objects.filter(day=day)
    cases = case_model.objects.filter(
        report__state=TestReport.State.PARSED,
        report__received_at__gte=day_start(day),
        report__received_at__lt=day_start(day + timedelta(days=1)),
    )
    if tests is not None:
        rows, cases = rows.filter(test_id__in=tests), cases.filter(test_id__in=tests)
    rows.delete()
    failing = Q(status__in=TestCase.FAILING)
    counts = (
        cases.values("test_id")
        .annotate(
            runs=Count("id", filter=Q(status__in=COUNTED)),
            failures=Count("id", filter=failing),
            last_run=Max("report__received_at"),
            last_failure=Max("report__received_at", filter=failing),
        )
        .order_by("test_id")
    )
    day_model.objects.bulk_create([day_model(day=day, **row) for row in counts], batch_size=BATCH)


def _lock(days: Iterable[date]) -> None:
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for day in sorted(days):  # one order: two writers of the same days never wait on each other in a cycle
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [LOCK_CLASS, day.toordinal()])


def _chunks(items: list[str]) -> Iterable[list[str]]:
    for start in range(0, len(items), BATCH):
        yield items[start : start + BATCH]
