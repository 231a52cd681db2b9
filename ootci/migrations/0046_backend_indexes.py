"""Indexes for the reads of one backend's own rows (PostgreSQL only), which read the tables' pages at 1,000,000 job
results (20–200 ms each):

- ``job_backend_finish``: a backend's attempts by event and finish, with what the matrix's rows read of them (the
  newer attempts' finish, outcome, PR and tested SHA; ``hud.stores.db.jobs.DatabaseStore.sha_keys``: 58,000 attempts
  of 30 days, 210–270 ms from the table's pages), the hardware share's count of a window (``hud.figures.where``) and
  the sick runners' last 24 hours (``ootci.runners``);
- ``job_backend_hardware``: the same of the attempts that name their device or runner (``ootci.environment``'s
  ``HARDWARE_KEYS``), so the share's other count is an index-only scan too;
- ``job_auto_retried``: the attempts the relay re-ran automatically, by run id (``hud.failing.lines.auto_retries``):
  a few rows, where the matrix's look-up scanned the table;
- ``dispatch_backend_created``: a backend's dispatches, newest first: the silent-backend check's last unanswered PR
  dispatches (``ootci.staleness``).

Built ``CONCURRENTLY`` as 0039 was.
"""

from django.db import migrations

INDEXES = {
    "job_backend_finish": """(backend_id, event_type, finished_at)
        INCLUDE (newer_finished_at, outcome, pr_number, job_sha)""",
    "job_backend_hardware": """(backend_id, event_type, finished_at)
        WHERE (environment ? 'device' OR environment ? 'runner')""",
    "job_auto_retried": "(run_id) INCLUDE (backend_id, run_attempt) WHERE auto_retry_at IS NOT NULL",
}
DISPATCH_INDEXES = {"dispatch_backend_created": "(backend_id, created_at, id)"}


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for table, indexes in (("ootci_jobresult", INDEXES), ("ootci_dispatch", DISPATCH_INDEXES)):
            for name, definition in indexes.items():
                schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {table} {definition}")


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for name in [*INDEXES, *DISPATCH_INDEXES]:
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("ootci", "0045_jobrun")]

    operations = [migrations.RunPython(create, drop)]
