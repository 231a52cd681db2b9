"""Each run's end-to-end time, kept by the database (PostgreSQL only), so the readiness windows' E2E p50 and p90 no
longer group and sort every latest attempt of 14 days (``hud.stores.db.runs``).

A run is one upstream event's jobs on a backend: its backend, event, PR and tested SHA. ``ootci_jobrun`` holds, per
run, the earliest start (else report time) and the last finish of its jobs' newest attempts (``newer_finished_at``
empty) that are not running, the seconds between them and their bucket (``ootci_time_bucket``, 0043). A run counts in
a window when its last finish is in it, with its whole time: a run that began before the window and ended in it took
all of it. ``ootci_jobrunday`` counts the runs by event, UTC day of their last finish, backend and bucket: a window's
counts per bucket are its whole days' rows and its first day's runs, not its 250,000 runs.

A run's times are a minimum and a maximum, which a deletion cannot take back by a sum: as ``ootci_jobpr`` (0043), the
trigger locks the run's row (an upsert, in key order) and then recomputes it from the job results by 0003's index of a
backend's tested SHAs, in a new snapshot, so two writers of one run see each other. Only the attempts that are or were
a run's (newest, not running) touch it: an ``in_progress`` callback, a verdict or a note costs the run nothing. The
triggers are 0043's functions with the run's statements added; the table is filled under the same lock as 0043's.
"""

import importlib

from django.db import migrations

times = importlib.import_module("ootci.migrations.0043_jobday_times")

RUN_KEY = "backend_id, event_type, pr_number, job_sha"
# An attempt that is part of its run: its job's newest, and not running.
PART = "{t}newer_finished_at IS NULL AND {t}outcome <> 'running'"
# What moves a run: its key, its finish and start, and whether it is part of the run.
RUN_WATCHED = (
    "{t}backend_id, {t}event_type, {t}pr_number, {t}job_sha, {t}finished_at, COALESCE({t}started_at, {t}created_at), "
    + PART
)
# 0043's watched columns and the run's: an UPDATE that changes none of them stops at its first statement.
WATCHED = times.WATCHED + ", job_sha, started_at, created_at"
DAY_KEY = "event_type, day, backend_id, bucket"


def same_run(a: str, b: str) -> str:
    return " AND ".join(
        f"{a}.{c} IS NOT DISTINCT FROM {b}.{c}" if c == "pr_number" else f"{a}.{c} = {b}.{c}"
        for c in RUN_KEY.split(", ")
    )


def touched_runs(op: str) -> str:
    """The runs (``RUN_KEY``) whose times the statement may have moved."""
    if op != "UPDATE":
        table = "new_rows" if op == "INSERT" else "old_rows"
        return f"SELECT DISTINCT {RUN_KEY} FROM {table} WHERE {PART.format(t='')}"
    before, after = (RUN_WATCHED.format(t=f"{t}.") for t in ("o", "n"))
    moved = f"FROM old_rows o JOIN new_rows n USING (id) WHERE ({before}) IS DISTINCT FROM ({after})"
    return " UNION ".join(
        f"SELECT {', '.join(f'{t}.{c}' for c in RUN_KEY.split(', '))} {moved} AND {PART.format(t=f'{t}.')}"
        for t in ("o", "n")
    )


def recount(keys: str) -> str:
    """The runs ``keys`` with their times recounted from the job results (``began``, ``last_at``; NULL when no attempt
    is part of the run any more)."""
    return f"""
    SELECT k.*, f.began, f.last_at FROM ({keys}) AS k
    CROSS JOIN LATERAL (
        SELECT MIN(COALESCE(j.started_at, j.created_at)) AS began, MAX(j.finished_at) AS last_at
        FROM ootci_jobresult j
        WHERE j.backend_id = k.backend_id AND j.job_sha = k.job_sha AND j.event_type = k.event_type
          AND j.pr_number IS NOT DISTINCT FROM k.pr_number AND {PART.format(t="j.")}) AS f"""


SECONDS = "CAST(EXTRACT(EPOCH FROM ({0}.last_at - {0}.began)) AS double precision)"


def run_statements(op: str) -> str:
    keys = touched_runs(op)
    lock = f"""
    INSERT INTO ootci_jobrun AS r ({RUN_KEY})
    SELECT {RUN_KEY} FROM ({keys}) AS keys ORDER BY {RUN_KEY}
    ON CONFLICT ({RUN_KEY}) DO UPDATE SET last_at = r.last_at"""
    # A new snapshot: another writer of these runs has committed by now, and its attempts are counted. The runs whose
    # times moved leave their day's and bucket's count and join their new one's.
    move = f"""
    WITH fresh AS (
        SELECT k.*, r.last_at AS was_at, r.bucket AS was_bucket FROM ootci_jobrun r JOIN ({recount(keys)}) AS k
            ON {same_run("r", "k")}
        WHERE (r.began, r.last_at) IS DISTINCT FROM (k.began, k.last_at)
    ), moved AS (
        UPDATE ootci_jobrun r SET began = f.began, last_at = f.last_at, seconds = {SECONDS.format("f")},
            bucket = ootci_time_bucket({SECONDS.format("f")})
        FROM fresh f WHERE {same_run("r", "f")}
        RETURNING r.event_type, r.backend_id, f.was_at, f.was_bucket, r.last_at AS now_at, r.bucket AS now_bucket
    )
    INSERT INTO ootci_jobrunday AS d ({DAY_KEY}, runs)
    SELECT {DAY_KEY}, SUM(n) FROM (
        SELECT event_type, CAST((was_at AT TIME ZONE 'UTC') AS date) AS day, backend_id, was_bucket AS bucket, -1 AS n
        FROM moved WHERE was_at IS NOT NULL
        UNION ALL
        SELECT event_type, CAST((now_at AT TIME ZONE 'UTC') AS date), backend_id, now_bucket, 1
        FROM moved WHERE now_at IS NOT NULL
    ) AS counted GROUP BY {DAY_KEY} HAVING SUM(n) <> 0 ORDER BY {DAY_KEY}
    ON CONFLICT ({DAY_KEY}) DO UPDATE SET runs = d.runs + excluded.runs"""
    return f"{lock};{move};"


def function(op: str) -> str:
    first = times.unchanged(WATCHED) if op == "UPDATE" else ""
    days, histogram = times.add_days(times.changes(times.ROWS, op)), times.add_times(times.changes(times.TIMES, op))
    return f"""
CREATE OR REPLACE FUNCTION ootci_jobday_{op.lower()}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN{first}{days};{histogram};{times.pr_statements(op)}{run_statements(op)}
    RETURN NULL;
END $$"""


TRUNCATE = """
CREATE OR REPLACE FUNCTION ootci_jobday_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN DELETE FROM ootci_jobday; DELETE FROM ootci_jobtime; DELETE FROM ootci_jobpr; DELETE FROM ootci_jobprday;
DELETE FROM ootci_jobrun; DELETE FROM ootci_jobrunday; RETURN NULL; END $$"""
FILL = f"""
    INSERT INTO ootci_jobrun ({RUN_KEY}, began, last_at, seconds, bucket)
    SELECT {RUN_KEY}, began, last_at, {SECONDS.format("f")}, ootci_time_bucket({SECONDS.format("f")}) FROM (
        SELECT {RUN_KEY}, MIN(COALESCE(started_at, created_at)) AS began, MAX(finished_at) AS last_at
        FROM ootci_jobresult WHERE {PART.format(t="")} GROUP BY {RUN_KEY}) AS f"""
FILL_DAYS = f"""
    INSERT INTO ootci_jobrunday ({DAY_KEY}, runs)
    SELECT event_type, CAST((last_at AT TIME ZONE 'UTC') AS date), backend_id, bucket, COUNT(*) FROM ootci_jobrun
    WHERE last_at IS NOT NULL GROUP BY 1, 2, 3, 4"""


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    run = schema_editor.execute
    run(
        """CREATE TABLE ootci_jobrun (
            backend_id bigint NOT NULL, event_type varchar(20) NOT NULL, pr_number integer,
            job_sha varchar(100) NOT NULL, began timestamp with time zone, last_at timestamp with time zone,
            seconds double precision, bucket integer,
            -- the SHA before the PR: a run is found by equality on the first three, the PR (which may be NULL) is then
            -- compared with IS NOT DISTINCT FROM, which no index answers
            UNIQUE NULLS NOT DISTINCT (backend_id, event_type, job_sha, pr_number))"""
    )
    # A window's first day's runs by their last finish (its counts per bucket), and one bucket's runs of a window.
    run("CREATE INDEX jobrun_event_last ON ootci_jobrun (event_type, last_at) INCLUDE (backend_id, bucket)")
    run("CREATE INDEX jobrun_bucket ON ootci_jobrun (event_type, backend_id, bucket, last_at) INCLUDE (seconds)")
    run(
        """CREATE TABLE ootci_jobrunday (
            event_type varchar(20) NOT NULL, day date NOT NULL, backend_id bigint NOT NULL, bucket integer NOT NULL,
            runs bigint NOT NULL, PRIMARY KEY (event_type, day, backend_id, bucket))"""
    )
    for op in ("INSERT", "DELETE", "UPDATE"):
        run(function(op))
    run(TRUNCATE)
    run("LOCK TABLE ootci_jobresult IN SHARE ROW EXCLUSIVE MODE")
    run(FILL)
    run(FILL_DAYS)


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for op in ("INSERT", "DELETE", "UPDATE"):
        schema_editor.execute(times.function(op))
    schema_editor.execute(times.TRUNCATE)
    schema_editor.execute("DROP TABLE IF EXISTS ootci_jobrun, ootci_jobrunday")


class Migration(migrations.Migration):
    dependencies = [("ootci", "0044_jobresult_stats_indexes")]

    operations = [migrations.RunPython(create, drop)]
