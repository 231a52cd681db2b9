"""Every case of every parsed test report in ClickHouse (`oot_test_case`), for per-test lookups across backends.

PostgreSQL keeps every case too (TestCase); this copy reads the raw report bytes again from the intermediate store
(`ootci.reports.blobs`) and parses them with the same parser (`ootci.reports.junit`), so it never loads PostgreSQL. It
runs with the job-result replication (`hud.tasks.clickhouse_replicate`: every minute, and after a parse, which changes
its job's counts) and follows the same high-water mark (`hud.models.ReplicationCursor`), here over TestReport rows in
parsed state ordered by (parsed_at, id): the cursor moves only after ClickHouse accepted a batch, so nothing is lost
while ClickHouse is down, and reports whose parse committed late are read again within `OVERLAP`. Re-sent rows (the
overlap, a re-parse, a run that stopped after its insert) have the same sorting key and collapse in the
ReplacingMergeTree; read the table `FINAL`. A re-parse that gives other cases (a parser change) or refuses the report
leaves rows the new parse does not replace: the report is marked (`TestReport.replaced`) and the next run deletes its
older versions (`_drop_replaced`). After each batch it sends, and after such a delete, the search's daily roll-up of
the days concerned is recomputed (``days_refresh``).

The table is defined in ``hud.stores.clickhouse.case_table``: granules of 1,024 rows, each its own compressed block
(``STORAGE``): the failing-tests history reads each failing
test's key range on one backend (about 170 rows in the bench), which with the default 8,192-row granules and 64 KB
blocks cost a whole granule or two, and their blocks, per test. A table created before keeps its granularity until it
is recreated (README, "Failing tests"); the search index still covers 8,192 rows per filter (8 granules).

Runs need no lock: two at once send the same rows, which collapse, and the cursor never moves back.
"""

import logging
from datetime import UTC, date, datetime
from typing import Any

from django.db.models import Q
from django.utils import timezone

from hud.models import ReplicationCursor
from hud.stores.clickhouse import case_table
from hud.stores.clickhouse import connection as clickhouse
from hud.stores.clickhouse.copy_jobs import OVERLAP, _micros
from hud.stores.clickhouse.history import IS_COUNTED, IS_FAILING
from ootci.models import TestReport
from ootci.reports import blobs, junit

logger = logging.getLogger(__name__)

TABLE = case_table.TABLE
CURSOR_NAME = TABLE
REPORTS_PER_READ = 50
REPLACED_PER_RUN = 500  # re-parsed reports whose earlier copies one run deletes (one statement)
BATCH_ROWS = 50_000

COLUMNS = [
    "generic_id",
    "backend_id",
    "reported_at",
    "report_id",
    "ordinal",
    "backend_repo",
    "job_id",
    "event_type",
    "pr_number",
    "job_sha",
    "workflow_name",
    "job_name",
    "file",
    "classname",
    "name",
    "status",
    "duration",
    "reruns",
    "message",
    "version",
]


# One day of one test, from its cases FINAL.
DAY_AGGREGATE = f"""
    SELECT generic_id, toDate(reported_at) AS day,
        if(countIf({IS_FAILING}) > 0, maxIf(reported_at, {IS_FAILING}), NULL), max(reported_at),
        countIf({IS_COUNTED}), countIf({IS_FAILING}), {{{{version:UInt64}}}}
    FROM {TABLE} FINAL
    {{where}}
    GROUP BY generic_id, day"""
DAY_INSERT = f"INSERT INTO {case_table.DAY_TABLE} (generic_id, day, last_failure, last_run, runs, failures, version)"


def replicate() -> int:
    """Copy every case of the reports parsed since the cursor; returns the cases sent. When ClickHouse (ClickHouseError)
    or the intermediate store fails, the cursor records the error and it is raised: the next run starts where this
    one's last accepted batch ended."""
    cursor, _ = ReplicationCursor.objects.get_or_create(name=CURSOR_NAME)
    started = timezone.now()
    after = cursor.start_position(bound=started - OVERLAP)
    sent = 0
    try:
        with clickhouse.session():
            schema_ensure()
            _drop_replaced()
            while reports := _reports_after(after):
                rows: list[list[Any]] = []
                days: set[date] = set()
                for report in reports:
                    rows += _case_rows(report)
                    days.add(report.received_at.astimezone(UTC).date())
                    after = (report.parsed_at, report.pk)
                    if len(rows) >= BATCH_ROWS or report is reports[-1]:
                        if rows:
                            clickhouse.insert(rows, column_names=COLUMNS, table=TABLE)
                            days_refresh(days)  # before the cursor moves: a failure sends them again
                        cursor.advance(updated_at=after[0], row_id=after[1], rows=len(rows))
                        sent, rows, days = sent + len(rows), [], set()
                if len(reports) < REPORTS_PER_READ:
                    break
    except Exception as ex:  # ClickHouse or the intermediate store: recorded, and the task shows the failure
        cursor.fail(error=str(ex), at=timezone.now())
        raise
    cursor.finish(reread_from=started - OVERLAP, at=timezone.now())
    return sent


def _drop_replaced() -> None:
    """Delete what the earlier parse of each re-parsed report left behind: its cases that the new parse's do not
    replace (other test ids, fewer cases) or all of them (a re-parse that refused the report). The new parse's rows
    are versioned by its own parse time, so only older versions go; a report parsed again meanwhile keeps its mark."""
    ended = TestReport.objects.filter(replaced=True).exclude(state=TestReport.State.PENDING)
    reports = list(ended.values_list("pk", "parsed_at", "received_at")[:REPLACED_PER_RUN])
    if not reports:
        return
    ids, versions = [pk for pk, _, _ in reports], [_micros(at) for _, at, _ in reports]
    clickhouse.command(
        f"DELETE FROM {TABLE} WHERE report_id IN {{ids:Array(UInt64)}} "
        "AND version < transform(report_id, {ids:Array(UInt64)}, {versions:Array(UInt64)}, toUInt64(0))",
        {"ids": ids, "versions": versions},
    )
    days_refresh({received.astimezone(UTC).date() for _, _, received in reports}, removed=True)
    done = Q()
    for pk, at, _ in reports:
        done |= Q(pk=pk, parsed_at=at)
    TestReport.objects.filter(done, replaced=True).update(replaced=False)


def _reports_after(after: tuple[datetime, int] | None) -> list[TestReport]:
    reports = TestReport.objects.filter(state=TestReport.State.PARSED).select_related("job__backend")
    if after is not None:
        parsed_at, report_id = after
        reports = reports.filter(Q(parsed_at__gt=parsed_at) | Q(pk__gt=report_id), parsed_at__gte=parsed_at)
    return list(reports.order_by("parsed_at", "pk")[:REPORTS_PER_READ])


def _case_rows(report: TestReport) -> list[list[Any]]:
    """Every case of ``report``, parsed again from its stored bytes; none when the bytes are gone (retention) or no
    longer parse (they did once: a parser change), which is logged."""
    job = report.job
    try:
        parsed = junit.stored_report_parse(report)
    except (blobs.Missing, junit.ReportRefused) as ex:
        logger.warning("test report %s: its cases are not copied to ClickHouse: %s", report.pk, ex)
        return []
    of_report = {
        "backend_id": job.backend_id,
        "reported_at": report.received_at,
        "report_id": report.pk,
        "backend_repo": job.backend.repo,
        "job_id": job.pk,
        "event_type": job.event_type,
        "pr_number": job.pr_number,
        "job_sha": job.job_sha,
        "workflow_name": job.workflow_name,
        "job_name": job.job_name,
        "version": _micros(report.parsed_at),
    }
    rows = []
    for ordinal, case in enumerate(parsed.kept):
        row = of_report | vars(case) | {"generic_id": case.test_id, "ordinal": ordinal}
        rows.append([row[column] for column in COLUMNS])
    return rows


def server_micros() -> int:
    return clickhouse.rows("SELECT toUnixTimestamp64Micro(now64(6))")[0][0]


def days_refresh(days: set[date], *, removed: bool = False) -> None:
    """Recompute the roll-up's rows of ``days`` from their cases (``case_table``'s docstring). ``removed``: cases of
    those days were deleted, so a test may have none left on a day: rows older than the new aggregate are deleted."""
    if not days:
        return
    version = server_micros()
    where = "PREWHERE toDate(reported_at) IN {days:Array(Date)}"
    clickhouse.command(DAY_INSERT + DAY_AGGREGATE.format(where=where), {"days": sorted(days), "version": version})
    if removed:
        clickhouse.command(
            f"DELETE FROM {case_table.DAY_TABLE} WHERE day IN {{days:Array(Date)}} AND version < {{version:UInt64}}",
            {"days": sorted(days), "version": version},
        )


def schema_ensure() -> None:
    """``case_table.ensure_schema``, and the search's roll-up filled from every case when it was just made."""
    if case_table.ensure_schema():
        clickhouse.command(DAY_INSERT + DAY_AGGREGATE.format(where=""), {"version": server_micros()})
