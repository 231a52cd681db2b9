"""What the overview's summary reads of a rolling window beyond counts, kept by the database (PostgreSQL only), so the
stats of the 7- and 30-day windows no longer sort every latest attempt (``hud.stores.db.stats``):

- ``ootci_jobday`` (0040, 0042) also sums run times (``execution_sum``, ``execution_n``): the average run time;
- ``ootci_jobtime``, a histogram of queue and run times by the same key (backend, event, day of finish, day of the
  newer attempts' finish) and a fixed log-scaled bucket (``ootci_time_bucket``: 16 a doubling, from 1/64 s to 2^20
  s, about 4.4 % wide): a percentile's bucket is found from the counts, and its exact value by reading only that
  bucket's attempts of the window (0044's indexes);
- ``ootci_jobpr``, per backend, event and PR, the latest finish of its jobs' newest attempts (``newer_finished_at``
  empty), and ``ootci_jobprday``, how many PRs have that latest finish on each UTC day: the distinct PRs of a window.

Counts and histograms are sums kept as 0040's are (the rows a statement added minus those it removed, upserted by key
in key order). A PR's latest finish is a maximum, which a deletion cannot take back by a sum: the trigger locks the
PR's row (an upsert, in key order), then recomputes the maximum from the job results by 0044's index; under READ
COMMITTED each statement of the trigger takes a new snapshot, so a second writer of the same PR, which waits for the
lock, recomputes with the first one's attempts. The triggers are 0040's (one function per statement kind, run before
0033's, whose UPDATE of ``newer_finished_at`` fires them again); the tables are filled from the job results under a
lock that holds writers off while they are.
"""

import importlib

from django.db import migrations

jobday = importlib.import_module("ootci.migrations.0040_jobday")
gates = importlib.import_module("ootci.migrations.0042_jobday_gates")

KEY = jobday.KEY
# 0042's columns and the run time's sum and count.
COLUMNS = gates.COLUMNS | {
    "execution_sum": "COALESCE(CAST(execution_time AS numeric), 0)",
    "execution_n": "CASE WHEN execution_time IS NULL THEN 0 ELSE 1 END",
}
NEW = ["execution_sum", "execution_n"]
DAYS = """
    SELECT *, CAST((finished_at AT TIME ZONE 'UTC') AS date) AS day,
           CAST((newer_finished_at AT TIME ZONE 'UTC') AS date) AS newer_day FROM {table}"""
# The attempts the day roll-ups hold (0040): those that count in some window starting at a UTC midnight.
HELD = "finished_at IS NOT NULL AND (newer_day IS NULL OR newer_day < day)"
ROWS = (
    f"\n    SELECT {KEY}, "
    + ", ".join(f"{{sign}} * {value} AS {column}" for column, value in COLUMNS.items())
    + f"\n    FROM ({DAYS}) AS rows_ WHERE {HELD}"
)
# Bucket edges: 0, then 2^(i/16) s from 1/64 s to 2^20 s (12 days); bucket 0 below 0, the last one at and above 2^20.
EDGES = [0.0] + [2 ** (i / 16) for i in range(-6 * 16, 20 * 16 + 1)]
BUCKET = f"""
CREATE OR REPLACE FUNCTION ootci_time_bucket(seconds double precision) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT width_bucket(seconds, '{{{", ".join(repr(e) for e in EDGES)}}}'::double precision[]) $$"""
TIME_KEY = f"{KEY}, bucket"
TIMES = f"""
    SELECT {KEY}, ootci_time_bucket(t.seconds) AS bucket, {{sign}} * t.queue_n AS queue_n, {{sign}} * t.run_n AS run_n
    FROM ({DAYS}) AS rows_
    CROSS JOIN LATERAL (VALUES (queue_time, 1, 0), (execution_time, 0, 1)) AS t (seconds, queue_n, run_n)
    WHERE {HELD} AND t.seconds IS NOT NULL"""
PR_KEY = "backend_id, event_type, pr_number"
# What moves a PR's latest finish: its job results' PR, finish, and whether a newer attempt has finished.
PR_WATCHED = f"{PR_KEY}, finished_at, newer_finished_at IS NULL"


def changes(rows: str, op: str) -> str:
    """The change a statement of kind ``op`` made, as rows of the roll-up ``rows`` (a SELECT with {sign}, {table})."""
    added, removed = rows.format(sign=1, table="new_rows"), rows.format(sign=-1, table="old_rows")
    return {"INSERT": added, "DELETE": removed, "UPDATE": f"{added}\n    UNION ALL{removed}"}[op]


def add_days(rows: str) -> str:
    names = ", ".join(COLUMNS)
    sums = ", ".join(f"SUM({c})" for c in COLUMNS)
    some = " OR ".join(f"SUM({c}) <> 0" for c in COLUMNS)
    adds = ", ".join(f"{c} = ootci_jobday.{c} + excluded.{c}" for c in COLUMNS)
    return f"""
    INSERT INTO ootci_jobday ({KEY}, {names})
    SELECT {KEY}, {sums} FROM ({rows}) AS changes
    GROUP BY {KEY} HAVING {some} ORDER BY {KEY}
    ON CONFLICT ({KEY}) DO UPDATE SET {adds}"""


def add_times(rows: str) -> str:
    return f"""
    INSERT INTO ootci_jobtime ({TIME_KEY}, queue_n, run_n)
    SELECT {TIME_KEY}, SUM(queue_n), SUM(run_n) FROM ({rows}) AS changes
    GROUP BY {TIME_KEY} HAVING SUM(queue_n) <> 0 OR SUM(run_n) <> 0 ORDER BY {TIME_KEY}
    ON CONFLICT ({TIME_KEY}) DO UPDATE SET queue_n = ootci_jobtime.queue_n + excluded.queue_n,
        run_n = ootci_jobtime.run_n + excluded.run_n"""


def touched_prs(op: str) -> str:
    """The PRs (``PR_KEY``) whose latest finish the statement may have moved."""
    if op == "UPDATE":
        before, after = (", ".join(f"{t}.{c}" for c in PR_WATCHED.split(", ")) for t in ("o", "n"))
        moved = f"FROM old_rows o JOIN new_rows n USING (id) WHERE ({before}) IS DISTINCT FROM ({after})"
        keys = " UNION ".join(
            f"SELECT {', '.join(f'{t}.{c}' for c in PR_KEY.split(', '))} {moved} AND {t}.pr_number IS NOT NULL"
            for t in ("o", "n")
        )
    else:
        table = "new_rows" if op == "INSERT" else "old_rows"
        keys = f"SELECT DISTINCT {PR_KEY} FROM {table} WHERE pr_number IS NOT NULL AND newer_finished_at IS NULL"
    return keys


def pr_statements(op: str) -> str:
    keys = touched_prs(op)
    # The PRs' rows, made or locked in key order (a no-op update keeps the value: a HOT update of a small row).
    lock = f"""
    INSERT INTO ootci_jobpr AS p ({PR_KEY}, last_at)
    SELECT {PR_KEY}, NULL FROM ({keys}) AS keys ORDER BY {PR_KEY}
    ON CONFLICT ({PR_KEY}) DO UPDATE SET last_at = p.last_at"""
    # A new snapshot: another writer of these PRs has committed by now, and its attempts are counted.
    move = f"""
    WITH fresh AS (
        SELECT p.backend_id, p.event_type, p.pr_number, p.last_at AS was, (
                SELECT MAX(j.finished_at) FROM ootci_jobresult j
                WHERE j.backend_id = p.backend_id AND j.event_type = p.event_type AND j.pr_number = p.pr_number
                  AND j.newer_finished_at IS NULL) AS now_
        FROM ootci_jobpr p JOIN ({keys}) AS keys USING ({PR_KEY})
    ), moved AS (
        UPDATE ootci_jobpr p SET last_at = f.now_ FROM fresh f
        WHERE p.backend_id = f.backend_id AND p.event_type = f.event_type AND p.pr_number = f.pr_number
          AND f.was IS DISTINCT FROM f.now_
        RETURNING f.backend_id, f.event_type, f.was, f.now_
    )
    INSERT INTO ootci_jobprday AS d (backend_id, event_type, day, prs)
    SELECT backend_id, event_type, day, SUM(n) FROM (
        SELECT backend_id, event_type, CAST((was AT TIME ZONE 'UTC') AS date) AS day, -1 AS n
        FROM moved WHERE was IS NOT NULL
        UNION ALL
        SELECT backend_id, event_type, CAST((now_ AT TIME ZONE 'UTC') AS date), 1 FROM moved WHERE now_ IS NOT NULL
    ) AS counted GROUP BY backend_id, event_type, day HAVING SUM(n) <> 0 ORDER BY backend_id, event_type, day
    ON CONFLICT (backend_id, event_type, day) DO UPDATE SET prs = d.prs + excluded.prs"""
    return f"{lock};{move};"


# Every column the roll-ups read: an UPDATE that changes none of them (a verdict, a note, a check run's id) is left
# at one statement, not the four that would add up to nothing.
WATCHED = (
    "backend_id, event_type, pr_number, finished_at, newer_finished_at, outcome, conclusion, queue_time, "
    "execution_time, dependency_wait"
)


def unchanged(watched: str = WATCHED) -> str:
    before, after = (", ".join(f"{t}.{c}" for c in watched.split(", ")) for t in ("o", "n"))
    return f"""
    IF NOT EXISTS (SELECT FROM old_rows o JOIN new_rows n USING (id) WHERE ({before}) IS DISTINCT FROM ({after})) THEN
        RETURN NULL;
    END IF;"""


def function(op: str) -> str:
    first = unchanged() if op == "UPDATE" else ""
    return f"""
CREATE OR REPLACE FUNCTION ootci_jobday_{op.lower()}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN{first}{add_days(changes(ROWS, op))};{add_times(changes(TIMES, op))};{pr_statements(op)}
    RETURN NULL;
END $$"""


TRUNCATE = """
CREATE OR REPLACE FUNCTION ootci_jobday_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN DELETE FROM ootci_jobday; DELETE FROM ootci_jobtime; DELETE FROM ootci_jobpr; DELETE FROM ootci_jobprday;
RETURN NULL; END $$"""
FILL_PRS = f"""
    INSERT INTO ootci_jobpr ({PR_KEY}, last_at)
    SELECT {PR_KEY}, MAX(finished_at) FROM ootci_jobresult
    WHERE pr_number IS NOT NULL AND newer_finished_at IS NULL GROUP BY {PR_KEY}"""
FILL_PR_DAYS = """
    INSERT INTO ootci_jobprday (backend_id, event_type, day, prs)
    SELECT backend_id, event_type, CAST((last_at AT TIME ZONE 'UTC') AS date), COUNT(*) FROM ootci_jobpr
    WHERE last_at IS NOT NULL GROUP BY 1, 2, 3"""


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    run = schema_editor.execute
    run(BUCKET)
    run(
        "ALTER TABLE ootci_jobday ADD COLUMN execution_sum numeric NOT NULL DEFAULT 0, "
        "ADD COLUMN execution_n bigint NOT NULL DEFAULT 0"
    )
    # One index, event and day first: the windows read it by day, and a write keeps one index, not two (0.1–0.2 ms of
    # a callback's write at 1,000,000 job results).
    run(
        """CREATE TABLE ootci_jobtime (
            backend_id bigint NOT NULL, event_type varchar(20) NOT NULL, day date NOT NULL, newer_day date,
            bucket integer NOT NULL, queue_n bigint NOT NULL, run_n bigint NOT NULL,
            UNIQUE NULLS NOT DISTINCT (event_type, day, backend_id, newer_day, bucket))"""
    )
    run(
        """CREATE TABLE ootci_jobpr (
            backend_id bigint NOT NULL, event_type varchar(20) NOT NULL, pr_number integer NOT NULL,
            last_at timestamp with time zone, PRIMARY KEY (backend_id, event_type, pr_number))"""
    )
    run("CREATE INDEX jobpr_event_last ON ootci_jobpr (event_type, last_at) INCLUDE (backend_id)")
    run(
        """CREATE TABLE ootci_jobprday (
            backend_id bigint NOT NULL, event_type varchar(20) NOT NULL, day date NOT NULL, prs bigint NOT NULL,
            PRIMARY KEY (backend_id, event_type, day))"""
    )
    for op in ("INSERT", "DELETE", "UPDATE"):
        run(function(op))
    run(TRUNCATE)
    run("LOCK TABLE ootci_jobresult IN SHARE ROW EXCLUSIVE MODE")
    run("DELETE FROM ootci_jobday")
    run(add_days(ROWS.format(sign=1, table="ootci_jobresult")))
    run(add_times(TIMES.format(sign=1, table="ootci_jobresult")))
    run(FILL_PRS)
    run(FILL_PR_DAYS)


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for op in ("INSERT", "DELETE", "UPDATE"):
        schema_editor.execute(gates.function(op))
    schema_editor.execute(
        "CREATE OR REPLACE FUNCTION ootci_jobday_truncate() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN DELETE FROM ootci_jobday; RETURN NULL; END $$"
    )
    schema_editor.execute("DROP TABLE IF EXISTS ootci_jobtime, ootci_jobpr, ootci_jobprday")
    schema_editor.execute("ALTER TABLE ootci_jobday " + ", ".join(f"DROP COLUMN {c}" for c in NEW))
    schema_editor.execute("DROP FUNCTION IF EXISTS ootci_time_bucket(double precision)")


class Migration(migrations.Migration):
    dependencies = [("ootci", "0042_jobday_gates")]

    operations = [migrations.RunPython(create, drop)]
