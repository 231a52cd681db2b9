"""Each job attempt's ``newer_finished_at``: the latest finish time among the newer attempts of its job, kept by the
database (PostgreSQL only), so the HUD picks a window's latest attempts with a filter instead of a sort.

A job's result in a window is its newest attempt (``JobResult.LATEST_ORDER``) among those finished in the window
(``hud.figures.queries``). An attempt is that one exactly when it finished in the window and every newer attempt of
its job finished before the window: ``finished_at >= since AND (newer_finished_at IS NULL OR newer_finished_at <
since)``. ``hud.stores.db.jobs`` reads it so; the 30-day overview at 1,000,000 job results no longer sorts 700,000
rows by job.

Statement triggers keep the column right on every write path (ORM saves, ``update()``, bulk inserts, deletes, raw
SQL): after a statement that adds or removes attempts, or changes one's job, order or finish time, the attempts of the
jobs it touched are numbered again by one window function (run with EXECUTE, so each statement is planned for the
number of rows it touched), under a transaction lock per job (``LOCKED_UP_TO``). Its own UPDATE changes no column the trigger compares, so it stops there. The column is
not a model field: SQLite (``make run``) has neither it nor the triggers and picks latest attempts by sorting, and the
ClickHouse copy reads the model's fields.
"""

from django.db import migrations

JOB = "backend_id, event_type, job_sha, workflow_name, job_name"
# Every column whose change can move an attempt's job, its place among its job's attempts, or its finish time.
WATCHED = f"{JOB}, created_at, run_attempt, finished_at"

# Two transactions writing attempts of one job at once would each miss the other's uncommitted attempt: the trigger
# takes a transaction lock per job it touched (in one order), so the second waits for the first to commit and then
# numbers with it. A statement touching more jobs than this (a backfill, a bench's bulk insert) takes none.
LOCKED_UP_TO = 100
LOCK_CLASS = 30  # pg_advisory_xact_lock's first key: this migration's number, apart from other advisory locks


def renumber(jobs: str) -> str:
    """The UPDATE that sets ``newer_finished_at`` of every attempt of the jobs ``jobs`` (a SELECT of JOB's columns)
    selects, and writes only the rows whose value changes."""
    return f"""
    WITH keys AS (SELECT DISTINCT {JOB} FROM ({jobs}) AS touched),
    attempts AS (
        SELECT j.id, j.newer_finished_at AS had,
               MAX(j.finished_at) OVER (
                   PARTITION BY {JOB}
                   ORDER BY j.created_at DESC, j.run_attempt DESC, j.id DESC
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS newer
        FROM ootci_jobresult j JOIN keys USING ({JOB})
    )
    UPDATE ootci_jobresult j SET newer_finished_at = a.newer FROM attempts a
    WHERE j.id = a.id AND a.had IS DISTINCT FROM a.newer"""


def changed(side: str) -> str:
    """The jobs, as they were (``o``) or are (``n``), of the rows an UPDATE changed in a WATCHED column."""
    before, after = (", ".join(f"{t}.{c}" for c in WATCHED.split(", ")) for t in ("o", "n"))
    return (
        f"SELECT {', '.join(f'{side}.{c}' for c in JOB.split(', '))} FROM old_rows o JOIN new_rows n USING (id) "
        f"WHERE ({before}) IS DISTINCT FROM ({after})"
    )


TOUCHED = {
    "INSERT": f"SELECT {JOB} FROM new_rows",
    "DELETE": f"SELECT {JOB} FROM old_rows",
    "UPDATE": f"{changed('o')} UNION ALL {changed('n')}",
}


# One job touched (a callback's write): a plan-cached statement over that job's attempts, by index.
ONE_JOB = """
        UPDATE ootci_jobresult j SET newer_finished_at = a.newer FROM (
            SELECT id, newer_finished_at AS had, MAX(finished_at) OVER (
                       ORDER BY created_at DESC, run_attempt DESC, id DESC
                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS newer
            FROM ootci_jobresult WHERE backend_id = k_backend AND event_type = k_event AND job_sha = k_sha
                AND workflow_name = k_workflow AND job_name = k_name
        ) AS a
        WHERE j.id = a.id AND a.had IS DISTINCT FROM a.newer;"""


def function(op: str) -> str:
    statement = renumber(TOUCHED[op]).replace("'", "''")
    return f"""
CREATE OR REPLACE FUNCTION ootci_jobresult_newer_{op.lower()}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    touched bigint;
    k_backend bigint;
    k_event text;
    k_sha text;
    k_workflow text;
    k_name text;
BEGIN
    SELECT count(*), min(backend_id), min(event_type), min(job_sha), min(workflow_name), min(job_name)
        INTO touched, k_backend, k_event, k_sha, k_workflow, k_name
        FROM (SELECT DISTINCT {JOB} FROM ({TOUCHED[op]}) AS rows_) AS touched;
    IF touched = 0 THEN
        RETURN NULL;
    END IF;
    IF touched <= {LOCKED_UP_TO} THEN
        PERFORM pg_advisory_xact_lock({LOCK_CLASS}, k) FROM (
            SELECT DISTINCT hashtext(concat_ws('|', {JOB})) AS k FROM ({TOUCHED[op]}) AS touched ORDER BY k
        ) AS keys;
    END IF;
    IF touched = 1 THEN{ONE_JOB}
    ELSE
        EXECUTE '{statement}';
    END IF;
    RETURN NULL;
END $$"""


def trigger(op: str) -> str:
    tables = {"INSERT": "NEW TABLE AS new_rows", "DELETE": "OLD TABLE AS old_rows"}.get(
        op, "OLD TABLE AS old_rows NEW TABLE AS new_rows"
    )
    return (
        f"CREATE TRIGGER jobresult_newer_{op.lower()} AFTER {op} ON ootci_jobresult REFERENCING {tables} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION ootci_jobresult_newer_{op.lower()}()"
    )


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("ALTER TABLE ootci_jobresult ADD COLUMN newer_finished_at timestamp with time zone")
    schema_editor.execute(renumber(f"SELECT {JOB} FROM ootci_jobresult"))
    for op in TOUCHED:
        schema_editor.execute(function(op))
        schema_editor.execute(trigger(op))


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for op in TOUCHED:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS jobresult_newer_{op.lower()} ON ootci_jobresult")
        schema_editor.execute(f"DROP FUNCTION IF EXISTS ootci_jobresult_newer_{op.lower()}()")
    schema_editor.execute("ALTER TABLE ootci_jobresult DROP COLUMN IF EXISTS newer_finished_at")


class Migration(migrations.Migration):
    dependencies = [("ootci", "0032_default_rules_held_out_13")]

    operations = [migrations.RunPython(create, drop)]
