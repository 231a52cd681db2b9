"""The per-test rows of ``hud.history.assembly`` from ClickHouse's `oot_test_case`
(``hud.stores.clickhouse.copy_cases``), read ``FINAL`` (re-sent and re-parsed copies of a case collapse to its latest
parse).

The table is sorted by generic id first, so one test's history is a range read. The search is a LIKE on the
lower-cased id, which the tables' n-gram bloom filter index (``case_table.SEARCH_INDEX``) answers by skipping the
granules that cannot hold the text. It reads the daily roll-up (``case_table.DAY_TABLE``, a row per test and day) for
the days wholly in the window, and the cases only for the part of the window's first day that the window holds, then
adds the two up per test, as ``hud.stores.db.history`` does: a search matching every test over 30 days of 10,000,000
cases read 9,000,000 of them (361 ms) and now reads 155,000 roll-up rows and the cases of part of a day. That part is a
PREWHERE on the arrival time, read first; it is safe under FINAL, which collapses the rows after it: ``reported_at`` is
in the sorting key, so every copy of a case is in the window or none is. Its cost is the arrival times of the month's
partition that holds the first day (the table is sorted by test, not time).

Rows mirror ``hud.stores.db.history`` column for column; ids are ordered by code point (ClickHouse's string order, and
PostgreSQL's with ``COLLATE "C"``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from hud.stores.base import CASE_COUNTED as COUNTED
from hud.stores.base import CASE_FAILING as FAILING
from hud.stores.clickhouse import case_table
from hud.stores.clickhouse import connection as clickhouse
from ootci.case_days import day_of, day_start

TABLE = case_table.TABLE
SINCE = "{since:DateTime64(6, 'UTC')}"
IS_FAILING = f"status IN {FAILING!r}"
IS_COUNTED = f"status IN {COUNTED!r}"


def like_escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class ClickHouseStore:
    def search_rows(self, *, text: str, since: datetime, offset: int, limit: int) -> list[dict]:
        """The daily roll-up (``case_table.DAY_TABLE``) for the days wholly in the window, the cases for the part of
        its first day that it holds, added up per test (as ``hud.stores.db.history`` does)."""
        whole = day_start(day_of(since - timedelta(microseconds=1)) + timedelta(days=1))  # the first at or after
        matching = "lowerUTF8(generic_id) LIKE lowerUTF8({pattern:String})"
        sql = f"""
        SELECT generic_id, max(f_failure) AS last_failure, max(f_run) AS last_run, sum(f_runs) AS runs,
            sum(f_failures) AS failures
        FROM (
            SELECT generic_id, last_failure AS f_failure, last_run AS f_run, runs AS f_runs, failures AS f_failures
            FROM {case_table.DAY_TABLE} FINAL
            PREWHERE day >= {{day:Date}}
            WHERE {matching}
            UNION ALL
            SELECT generic_id, if(f_failures > 0, maxIf(reported_at, {IS_FAILING}), NULL) AS f_failure,
                max(reported_at) AS f_run, countIf({IS_COUNTED}) AS f_runs, countIf({IS_FAILING}) AS f_failures
            FROM {TABLE} FINAL
            PREWHERE reported_at >= {SINCE} AND reported_at < {{whole:DateTime64(6, 'UTC')}}
            WHERE {matching}
            GROUP BY generic_id
        )
        GROUP BY generic_id
        ORDER BY last_failure DESC NULLS LAST, generic_id
        LIMIT {int(limit)} OFFSET {int(offset)}"""
        pattern = f"%{like_escaped(text)}%"
        with clickhouse.session():
            return clickhouse.select(sql, {"pattern": pattern, "since": since, "whole": whole, "day": whole.date()})

    def history_rows(self, *, generic_id: str, since: datetime) -> list[dict]:
        sql = f"""
        SELECT backend_id, job_id, event_type, pr_number, job_sha AS sha, status, reruns, reported_at AS at, report_id
        FROM {TABLE} FINAL
        WHERE generic_id = {{id:String}} AND reported_at >= {SINCE}
        ORDER BY reported_at, report_id, ordinal"""
        with clickhouse.session():
            return clickhouse.select(sql, {"id": generic_id, "since": since})

    def failure_messages(self, *, generic_id: str, report_ids: list[int]) -> dict[int, str]:
        sql = f"""
        SELECT report_id, argMax(message, ordinal) AS message
        FROM {TABLE} FINAL
        WHERE generic_id = {{id:String}} AND report_id IN {{ids:Array(UInt64)}} AND {IS_FAILING}
        GROUP BY report_id"""
        with clickhouse.session():
            return {r["report_id"]: r["message"] for r in clickhouse.select(sql, {"id": generic_id, "ids": report_ids})}
