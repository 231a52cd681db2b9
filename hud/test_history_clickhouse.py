"""The per-test rows of ``hud.test_history`` from ClickHouse's `oot_test_case` (``hud.clickhouse_cases``), read
``FINAL`` (re-sent and re-parsed copies of a case collapse to its latest parse).

The table is sorted by generic id first, so one test's history is a range read. The search filters on the sorting
key's own columns (generic id and arrival time), which ClickHouse applies before the FINAL merge, and a token index
over the id's n-grams (``SEARCH_INDEX``) skips the granules that cannot contain the text. Rows mirror
``hud.test_history_db`` column for column; ids are ordered by code point (ClickHouse's string order).
"""

from __future__ import annotations

from datetime import datetime

from hud import clickhouse, clickhouse_cases
from hud.test_history import COUNTED, FAILING

TABLE = clickhouse_cases.TABLE
SINCE = "{since:DateTime64(6, 'UTC')}"
IS_FAILING = f"status IN {FAILING!r}"
IS_COUNTED = f"status IN {COUNTED!r}"


class ClickHouseStore:
    def search_rows(self, *, text: str, since: datetime, offset: int, limit: int) -> list[dict]:
        sql = f"""
        SELECT generic_id, if(failures > 0, maxIf(reported_at, {IS_FAILING}), NULL) AS last_failure,
            max(reported_at) AS last_run, countIf({IS_COUNTED}) AS runs, countIf({IS_FAILING}) AS failures
        FROM {TABLE} FINAL
        WHERE positionCaseInsensitiveUTF8(generic_id, {{text:String}}) > 0 AND reported_at >= {SINCE}
        GROUP BY generic_id
        ORDER BY last_failure DESC NULLS LAST, generic_id
        LIMIT {int(limit)} OFFSET {int(offset)}"""
        with clickhouse.session():
            return clickhouse.select(sql, {"text": text, "since": since})

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
