"""An index of the attempts whose newer attempts finished before them, by that finish (PostgreSQL only): the HUD's
rolling windows read whole days from the daily roll-up (``ootci_jobday``, 0040 and 0042) and the window's first,
partial day from the job results, and an attempt that finished after that day can still be a latest attempt of the
window only when its newer attempts finished on that day before the window's start (``hud.stores.db.rollup``). They
are few (a re-run that finished before its first attempt: 34,000 of 1,000,000 in the bench), so the index is small;
the 0039 index, ordered by ``finished_at``, would read the whole window to find them. Built ``CONCURRENTLY`` as 0039
was.
"""

from django.db import migrations

INDEX = "job_newer_finish"
CREATE = f"""
CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON ootci_jobresult (event_type, newer_finished_at)
    INCLUDE (finished_at, backend_id, outcome, conclusion, queue_time, execution_time, dependency_wait)
    WHERE newer_finished_at < finished_at"""


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("ootci", "0040_jobday")]

    operations = [migrations.RunPython(create, drop)]
