"""The failing-tests case store on ClickHouse: `oot_test_case` (``hud.stores.clickhouse.copy_cases``), each case in its
latest version (what ``FINAL`` reads; see ``latest``).

Only the history is read here (the last results of each test on its backend, by the sorting key generic_id,
backend_id, …); the cases of given jobs come from the database (``hud.failing.classes.FallbackCases``). Rows as
``hud.failing.classes.CaseStore`` describes them, the same as ``hud.stores.db.failing`` gives on the same data: a case's
order within its report is its ``ordinal`` (the database's case ids follow it), its time ``reported_at`` (the report's
``received_at``). Driver failures are ClickHouseError; ``hud.figures.queries`` then reads the database.
"""

from __future__ import annotations

from typing import Any

from hud.stores.base import CASE_COUNTED as COUNTED
from hud.stores.base import as_datetime
from hud.stores.clickhouse import case_table
from hud.stores.clickhouse import connection as clickhouse
from hud.stores.clickhouse.case_table import TABLE
from ootci.verdicts import BASELINE_EVENTS as BASELINE

KEY = "generic_id, backend_id, reported_at, report_id, ordinal"  # the sorting key: every version of a case has it
TESTS = "generic_id IN {test_ids:Array(String)}"


def latest(columns: str, where: str) -> str:
    """The latest version of each case that meets ``where`` — exactly the rows ``FINAL`` reads — for a ``where`` over
    columns every version of a case shares (test, backend, job: a case is re-sent only with its own report).

    ``FINAL`` merges every part's ranges of the selected keys before applying a filter on other columns (``job_id``,
    which the key does not lead with) and, with several parts, costs seconds on 10 million cases; here only the
    matching rows are read (PREWHERE), sorted by key and version, and the newest of each key kept."""
    return f"SELECT {columns} FROM {TABLE} WHERE {where} ORDER BY {KEY}, version DESC LIMIT 1 BY {KEY}"


def select(sql: str, **parameters: Any) -> list[dict[str, Any]]:
    with clickhouse.session():
        return clickhouse.select(sql, parameters)


class ClickHouseCases:
    """The history read (``hud.failing.classes.FallbackCases`` reads the cases of given jobs from the database)."""

    def history(self, *, tests: dict[int, list[str]], limit: int) -> list[dict]:
        if not tests:
            return []
        # The job results' table can be there before the first case replication creates this one: until then
        # ClickHouse has no cases yet (as it lacks a job not yet copied), which is not an outage.
        with clickhouse.session():
            case_table.ensure_schema()
        pairs = [(bid, test) for bid, ids in tests.items() for test in ids]
        wanted = f"{TESTS} AND (backend_id, generic_id) IN {{pairs:Array(Tuple(UInt64, String))}}"
        wanted += " AND event_type IN {baseline_events:Array(String)}"  # ootci.verdicts: the backend's own runs
        columns = "backend_id, generic_id, status, reruns, job_id, job_sha, reported_at, report_id, ordinal"
        cases = latest(columns, wanted)
        sql = f"""SELECT backend_id, generic_id AS test_id, status, reruns, job_id, job_sha, reported_at AS at
            FROM ({cases})
            WHERE status IN {{counted:Array(String)}}
            ORDER BY backend_id, test_id, reported_at DESC, report_id DESC, ordinal DESC
            LIMIT {int(limit)} BY backend_id, test_id"""
        test_ids = sorted({test for _, test in pairs})
        found = select(sql, test_ids=test_ids, pairs=pairs, counted=list(COUNTED), baseline_events=list(BASELINE))
        return [
            r | {"backend_id": int(r["backend_id"]), "job_id": int(r["job_id"]), "at": as_datetime(r["at"])}
            for r in found
        ]
