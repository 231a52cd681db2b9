"""The daily roll-up of latest attempts (``ootci_jobday``, 0040) also counts what the level gates read (PostgreSQL
only): per backend, event, day of finish and day of the newer attempts' finish, the test failures, running attempts,
timeouts (infra failures that timed out), overruns (counted attempts that ran over ``ootci.gates.OVERRUN_HOURS``) and
the sums and counts of the queue times and dependency waits, so the readiness windows (14 and 7 days, rolling) add up
a few hundred rows for their whole days and read only their first, partial day from the job results
(``hud.stores.db.rollup``).

Counts are exact. The sums are ``numeric``, so adding and removing attempts leaves no rounding behind; a double
converts to ``numeric`` with 15 significant digits, so an average differs from the job results' own ``AVG`` by less
than a millionth of a second (tests/hud/stores/test_rollup.py bounds it). The triggers are 0040's, with these
columns; the table is refilled from the job results, under a lock that holds writers off while it is.
"""

import importlib

from django.db import migrations

jobday = importlib.import_module("ootci.migrations.0040_jobday")

KEY = jobday.KEY
OVERRUN_SECONDS = 3 * 3600.0  # ootci.gates.OVERRUN_HOURS (a test holds them equal)
COUNTED = "outcome IN ('success', 'test', 'infra')"
# Column → its value for one attempt (times {sign}); the sums of these are the gate figures of the rows.
COLUMNS = {
    "ok": "CASE WHEN outcome = 'success' THEN 1 ELSE 0 END",
    "total": f"CASE WHEN {COUNTED} THEN 1 ELSE 0 END",
    "seen": "1",
    "test": "CASE WHEN outcome = 'test' THEN 1 ELSE 0 END",
    "running": "CASE WHEN outcome = 'running' THEN 1 ELSE 0 END",
    "timed_out": "CASE WHEN outcome = 'infra' AND conclusion = 'timed_out' THEN 1 ELSE 0 END",
    "overruns": f"CASE WHEN {COUNTED} AND execution_time > {OVERRUN_SECONDS} THEN 1 ELSE 0 END",
    "queue_sum": "COALESCE(CAST(queue_time AS numeric), 0)",
    "queue_n": "CASE WHEN queue_time IS NULL THEN 0 ELSE 1 END",
    "dependency_sum": "COALESCE(CAST(dependency_wait AS numeric), 0)",
    "dependency_n": "CASE WHEN dependency_wait IS NULL THEN 0 ELSE 1 END",
}
NEW = [c for c in COLUMNS if c not in ("ok", "total", "seen")]
ROWS = (
    """
    SELECT backend_id, event_type, CAST((finished_at AT TIME ZONE 'UTC') AS date) AS day,
           CAST((newer_finished_at AT TIME ZONE 'UTC') AS date) AS newer_day, """
    + ", ".join(f"{{sign}} * {value} AS {column}" for column, value in COLUMNS.items())
    + """
    FROM {table}
    WHERE finished_at IS NOT NULL
      AND (newer_finished_at IS NULL
           OR CAST((newer_finished_at AT TIME ZONE 'UTC') AS date) < CAST((finished_at AT TIME ZONE 'UTC') AS date))"""
)
CHANGES = {
    "INSERT": ROWS.format(sign=1, table="new_rows"),
    "DELETE": ROWS.format(sign=-1, table="old_rows"),
    "UPDATE": ROWS.format(sign=1, table="new_rows") + "\n    UNION ALL" + ROWS.format(sign=-1, table="old_rows"),
}


def add(changes: str) -> str:
    names = ", ".join(COLUMNS)
    sums = ", ".join(f"SUM({c})" for c in COLUMNS)
    some = " OR ".join(f"SUM({c}) <> 0" for c in COLUMNS)
    adds = ", ".join(f"{c} = ootci_jobday.{c} + excluded.{c}" for c in COLUMNS)
    return f"""
    INSERT INTO ootci_jobday ({KEY}, {names})
    SELECT {KEY}, {sums} FROM ({changes}) AS changes
    GROUP BY {KEY} HAVING {some} ORDER BY {KEY}
    ON CONFLICT ({KEY}) DO UPDATE SET {adds}"""


def function(op: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION ootci_jobday_{op.lower()}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN{add(CHANGES[op])};
    RETURN NULL;
END $$"""


def refill(schema_editor, rows: str, add_rows) -> None:
    schema_editor.execute("LOCK TABLE ootci_jobresult IN SHARE ROW EXCLUSIVE MODE")
    schema_editor.execute("DELETE FROM ootci_jobday")
    schema_editor.execute(add_rows(rows.format(sign=1, table="ootci_jobresult")))


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    kinds = {c: "numeric" if c.endswith("_sum") else "bigint" for c in NEW}
    schema_editor.execute(
        "ALTER TABLE ootci_jobday " + ", ".join(f"ADD COLUMN {c} {t} NOT NULL DEFAULT 0" for c, t in kinds.items())
    )
    for op in CHANGES:
        schema_editor.execute(function(op))
    refill(schema_editor, ROWS, add)


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for op in CHANGES:
        schema_editor.execute(jobday.function(op))
    schema_editor.execute("ALTER TABLE ootci_jobday " + ", ".join(f"DROP COLUMN {c}" for c in NEW))
    refill(schema_editor, jobday.ROWS, jobday.add)


class Migration(migrations.Migration):
    dependencies = [("ootci", "0041_jobresult_newer_finish_index")]

    operations = [migrations.RunPython(create, drop)]
