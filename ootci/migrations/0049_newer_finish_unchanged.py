"""``newer_finished_at`` (0033) is renumbered for one job only when a value changes.

A callback's write touches one job, and nearly always leaves its attempts' ``newer_finished_at`` as they were (a
job's first attempt, or its newest one starting). 0033's one-job UPDATE then wrote no row, but an UPDATE fires the
table's statement triggers whatever it writes: both of them ran again (the day roll-ups' and this one's), a third of
what PostgreSQL spent on a completed callback's triggers. The functions now ask first, by the same window, and
update only when a value differs. Nothing else changes: the many-job statement, the locks, the triggers.
"""

import importlib

from django.db import migrations

newer = importlib.import_module("ootci.migrations.0033_job_newer_finish")

ATTEMPTS = """
            SELECT id, newer_finished_at AS had, MAX(finished_at) OVER (
                       ORDER BY created_at DESC, run_attempt DESC, id DESC
                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS newer
            FROM ootci_jobresult WHERE backend_id = k_backend AND event_type = k_event AND job_sha = k_sha
                AND workflow_name = k_workflow AND job_name = k_name"""
assert ATTEMPTS in newer.ONE_JOB  # the window 0033 renumbers by, asked first here
ONE_JOB_WHEN_CHANGED = f"""
        IF EXISTS (SELECT FROM ({ATTEMPTS}) AS a WHERE a.had IS DISTINCT FROM a.newer) THEN{newer.ONE_JOB}
        END IF;"""


def function(op: str) -> str:
    return newer.function(op).replace(newer.ONE_JOB, ONE_JOB_WHEN_CHANGED)


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for op in newer.TOUCHED:
        schema_editor.execute(function(op))


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for op in newer.TOUCHED:
        schema_editor.execute(newer.function(op))


class Migration(migrations.Migration):
    dependencies = [("ootci", "0048_testrecent_fill")]

    operations = [migrations.RunPython(create, drop)]
