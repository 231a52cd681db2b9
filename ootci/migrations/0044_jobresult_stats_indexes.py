"""The indexes the overview's stats read besides the roll-ups of 0043 (PostgreSQL only; ``hud.stores.db.stats``):

- ``job_queue_bucket``, ``job_run_bucket``: the attempts that can be a job's latest in some window (as 0039's), by
  event, backend, bucket of their queue or run time (``ootci_time_bucket``) and finish: a percentile reads the one
  bucket that holds its rank, and only that bucket's attempts of the window (a few thousand at 1,000,000 job results
  over 30 days), not the window's;
- ``job_pr_newest``: the newest attempts of each PR's jobs by backend, event, PR and finish, so the trigger of 0043
  finds a PR's latest finish in one index probe;
- ``job_odd_finish``: the attempts whose newer attempts finished before them (as 0041's) by finish, for the PRs
  whose only latest attempts in a window are such (0041's, ordered by the newer finish, would read them all).

Built ``CONCURRENTLY`` as 0039 was.
"""

from django.db import migrations

LATEST = "newer_finished_at IS NULL OR newer_finished_at < finished_at"
INDEXES = {
    "job_queue_bucket": f"""(event_type, backend_id, ootci_time_bucket(queue_time), finished_at)
        INCLUDE (queue_time, newer_finished_at) WHERE queue_time IS NOT NULL AND ({LATEST})""",
    "job_run_bucket": f"""(event_type, backend_id, ootci_time_bucket(execution_time), finished_at)
        INCLUDE (execution_time, newer_finished_at) WHERE execution_time IS NOT NULL AND ({LATEST})""",
    "job_pr_newest": """(backend_id, event_type, pr_number, finished_at)
        WHERE newer_finished_at IS NULL AND pr_number IS NOT NULL""",
    "job_odd_finish": """(event_type, finished_at) INCLUDE (backend_id, pr_number, newer_finished_at)
        WHERE newer_finished_at < finished_at""",
}


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for name, definition in INDEXES.items():
            schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON ootci_jobresult {definition}")


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for name in INDEXES:
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("ootci", "0043_jobday_times")]

    operations = [migrations.RunPython(create, drop)]
