"""The failing-tests case store on ClickHouse: `oot_test_case` (``hud.clickhouse_cases``), read ``FINAL``.

Rows as ``hud.failing_tests.CaseStore`` describes them, the same as ``hud.failing_tests_db`` gives on the same data: a
case's order within its report is its ``ordinal`` (the database's case ids follow it), its time ``reported_at`` (the
report's ``received_at``). Reads by test id use the sorting key (generic_id, backend_id, …); the read by job, which the
key does not lead with, first finds the keys of the matching rows without FINAL and then merges only those
(as ``hud.store_clickhouse.matching``). Driver failures are ClickHouseError; ``hud.queries`` then reads the database.
"""

from __future__ import annotations

from typing import Any

from hud import clickhouse
from hud.clickhouse_cases import TABLE
from hud.failing_tests import COUNTED, FAILING
from hud.store import as_datetime

KEY = "(generic_id, backend_id, reported_at, report_id, ordinal)"
JOBS = "job_id IN {job_ids:Array(UInt64)}"
TESTS = "generic_id IN {test_ids:Array(String)}"


def matching(where: str) -> str:
    """``oot_test_case FINAL WHERE where``, merging only the rows some version of which meets ``where``."""
    return f"{TABLE} FINAL WHERE {KEY} IN (SELECT {KEY} FROM {TABLE} WHERE {where}) AND {where}"


def select(sql: str, **parameters: Any) -> list[dict[str, Any]]:
    with clickhouse.session():
        return clickhouse.select(sql, parameters)


class ClickHouseCases:
    def failing_cases(self, *, job_ids: list[int]) -> list[dict]:
        if not job_ids:
            return []
        where = f"{JOBS} AND status IN {{failing:Array(String)}}"
        sql = f"""SELECT job_id, generic_id AS test_id, status, reruns, message FROM {matching(where)}
            ORDER BY job_id, report_id, ordinal"""
        return [r | {"job_id": int(r["job_id"])} for r in select(sql, job_ids=job_ids, failing=list(FAILING))]

    def cases_of(self, *, job_ids: list[int], test_ids: list[str]) -> list[dict]:
        if not job_ids or not test_ids:
            return []
        sql = f"SELECT job_id, generic_id AS test_id, status, reruns FROM {TABLE} FINAL WHERE {TESTS} AND {JOBS}"
        return [r | {"job_id": int(r["job_id"])} for r in select(sql, job_ids=job_ids, test_ids=test_ids)]

    def history(self, *, backend_ids: list[int], test_ids: list[str], limit: int) -> list[dict]:
        if not backend_ids or not test_ids:
            return []
        sql = f"""SELECT backend_id, generic_id AS test_id, status, job_id, job_sha, reported_at AS at
            FROM {TABLE} FINAL
            WHERE {TESTS} AND backend_id IN {{backend_ids:Array(UInt64)}} AND status IN {{counted:Array(String)}}
            ORDER BY backend_id, test_id, reported_at DESC, report_id DESC, ordinal DESC
            LIMIT {int(limit)} BY backend_id, test_id"""
        found = select(sql, backend_ids=backend_ids, test_ids=test_ids, counted=list(COUNTED))
        return [
            r | {"backend_id": int(r["backend_id"]), "job_id": int(r["job_id"]), "at": as_datetime(r["at"])}
            for r in found
        ]
