"""The HUD's daily roll-up of latest attempts (PostgreSQL only): ``ootci_jobday`` counts, per backend, event, UTC day
of ``finished_at`` and UTC day of ``newer_finished_at`` (0033; none for a job's newest attempt), the finished attempts
(``seen``) and those that count (success, test, infra: ``ok`` successes of ``total``), kept by the database on every
write, so the daily pass rates (the overview's sparklines, the metrics page) add up a few hundred rows instead of
reading every latest attempt.

A daily figure's window starts at a UTC midnight ``D``, and an attempt is its job's latest in it when it finished on or
after ``D`` and ``newer_finished_at`` is empty or before ``D`` (``hud.stores.db.jobs.latest_sql``): by days, ``day >=
D`` and ``newer_day`` empty or ``< D``. The sum over those rows is the count over the attempts, exactly
(``hud.stores.db.jobs.daily_rollup``). An attempt whose newer ones finished on or after its own finish day counts in
no such window and is left out.

Statement triggers with transition tables add each statement's change: the rows it inserted, minus those it deleted,
the new values of the rows it updated minus their old ones, upserted by key (``ON CONFLICT … DO UPDATE``, rows locked
in key order, so concurrent writers add up). The 0033 triggers set ``newer_finished_at`` by an UPDATE, which these
triggers see like any other. A TRUNCATE of the job results empties it. The column and the table are not model fields:
SQLite (``make run``) counts the latest attempts themselves.
"""

from django.db import migrations

KEY = "backend_id, event_type, day, newer_day"
# An attempt as its roll-up row: its key and its counts, for the attempts that count in some day-aligned window.
ROWS = """
    SELECT backend_id, event_type, CAST((finished_at AT TIME ZONE 'UTC') AS date) AS day,
           CAST((newer_finished_at AT TIME ZONE 'UTC') AS date) AS newer_day,
           {sign} * CASE WHEN outcome = 'success' THEN 1 ELSE 0 END AS ok,
           {sign} * CASE WHEN outcome IN ('success', 'test', 'infra') THEN 1 ELSE 0 END AS total, {sign} AS seen
    FROM {table}
    WHERE finished_at IS NOT NULL
      AND (newer_finished_at IS NULL
           OR CAST((newer_finished_at AT TIME ZONE 'UTC') AS date) < CAST((finished_at AT TIME ZONE 'UTC') AS date))"""
CHANGES = {
    "INSERT": ROWS.format(sign=1, table="new_rows"),
    "DELETE": ROWS.format(sign=-1, table="old_rows"),
    "UPDATE": ROWS.format(sign=1, table="new_rows") + "\n    UNION ALL" + ROWS.format(sign=-1, table="old_rows"),
}


def add(changes: str) -> str:
    return f"""
    INSERT INTO ootci_jobday ({KEY}, ok, total, seen)
    SELECT {KEY}, SUM(ok), SUM(total), SUM(seen) FROM ({changes}) AS changes
    GROUP BY {KEY} HAVING SUM(ok) <> 0 OR SUM(total) <> 0 OR SUM(seen) <> 0 ORDER BY {KEY}
    ON CONFLICT ({KEY}) DO UPDATE SET ok = ootci_jobday.ok + excluded.ok, total = ootci_jobday.total + excluded.total,
        seen = ootci_jobday.seen + excluded.seen"""


def function(op: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION ootci_jobday_{op.lower()}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN{add(CHANGES[op])};
    RETURN NULL;
END $$"""


def trigger(op: str) -> str:
    tables = {"INSERT": "NEW TABLE AS new_rows", "DELETE": "OLD TABLE AS old_rows"}.get(
        op, "OLD TABLE AS old_rows NEW TABLE AS new_rows"
    )
    return (
        f"CREATE TRIGGER jobresult_jobday_{op.lower()} AFTER {op} ON ootci_jobresult REFERENCING {tables} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION ootci_jobday_{op.lower()}()"
    )


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        """CREATE TABLE ootci_jobday (
            backend_id bigint NOT NULL, event_type varchar(20) NOT NULL, day date NOT NULL, newer_day date,
            ok bigint NOT NULL, total bigint NOT NULL, seen bigint NOT NULL,
            UNIQUE NULLS NOT DISTINCT (backend_id, event_type, day, newer_day))"""
    )
    schema_editor.execute("CREATE INDEX jobday_event_day ON ootci_jobday (event_type, day)")
    schema_editor.execute(add(ROWS.format(sign=1, table="ootci_jobresult")))
    for op in CHANGES:
        schema_editor.execute(function(op))
        schema_editor.execute(trigger(op))
    schema_editor.execute(
        "CREATE FUNCTION ootci_jobday_truncate() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN DELETE FROM ootci_jobday; RETURN NULL; END $$"
    )
    schema_editor.execute(
        "CREATE TRIGGER jobresult_jobday_truncate AFTER TRUNCATE ON ootci_jobresult "
        "FOR EACH STATEMENT EXECUTE FUNCTION ootci_jobday_truncate()"
    )


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for op in [*CHANGES, "TRUNCATE"]:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS jobresult_jobday_{op.lower()} ON ootci_jobresult")
        schema_editor.execute(f"DROP FUNCTION IF EXISTS ootci_jobday_{op.lower()}()")
    schema_editor.execute("DROP TABLE IF EXISTS ootci_jobday")


class Migration(migrations.Migration):
    dependencies = [("ootci", "0039_jobresult_latest_cover")]

    operations = [migrations.RunPython(create, drop)]
