"""A covering index of the attempts that can be a job's latest in some window (PostgreSQL only): the HUD's window
statements (``hud.stores.db.jobs.latest_sql``) read it alone, by an index-only scan, instead of the table's pages.

An attempt is its job's latest in the window since ``S`` when ``finished_at >= S`` and ``newer_finished_at`` (0033) is
empty or before ``S``; one whose newer attempts finished at or after its own finish (``newer_finished_at >=
finished_at``) is so in no window, so the index leaves it out. It holds every column the figures read of a latest
attempt (``hud.stores.base.NEEDS``, ``hud.stores.db.jobs.LATEST_COLUMNS``). At 1,000,000 job results the 14-day
window read 53,000 table pages (about 0.4 s); the index is 120 MB. Built ``CONCURRENTLY`` as 0035 was (outside a
transaction: the job results keep being written while it builds).
"""

from django.db import migrations

INDEX = "job_latest_cover"
CREATE = f"""
CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON ootci_jobresult (event_type, finished_at)
    INCLUDE (newer_finished_at, backend_id, outcome, conclusion, queue_time, execution_time, dependency_wait,
             pr_number, job_sha, started_at, created_at)
    WHERE newer_finished_at IS NULL OR newer_finished_at < finished_at"""


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("ootci", "0038_testday_fill")]

    operations = [migrations.RunPython(create, drop)]
