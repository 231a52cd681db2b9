"""TestCase's covering test_id index also carries ``reruns``: the failing tests' history read (the PR page's, 12
backends over 1 million cases) selects it, and without it PostgreSQL scanned the whole table (124 ms) instead of the
index alone (45 ms). Built ``CONCURRENTLY`` on PostgreSQL as 0011 was (outside a transaction: a large TestCase table
keeps taking writes meanwhile); SQLite has no covering indexes and keeps a plain one.
"""

from importlib import import_module

from django.db import migrations, models

swap = import_module("ootci.migrations.0011_testcase_test_history_index").swap
OLD = models.Index(fields=["test_id"], include=["job", "status", "report", "id"], name="testcase_test_history")
NEW = models.Index(
    fields=["test_id"], include=["job", "status", "report", "id", "reruns"], name="testcase_test_history_r"
)


def forwards(apps, schema_editor) -> None:
    swap(apps, schema_editor, add=NEW, remove=OLD)


def backwards(apps, schema_editor) -> None:
    swap(apps, schema_editor, add=OLD, remove=NEW)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("ootci", "0034_default_rules_held_out_14")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forwards, backwards)],
            state_operations=[
                migrations.RemoveIndex(model_name="testcase", name="testcase_test_history"),
                migrations.AddIndex(model_name="testcase", index=NEW),
            ],
        )
    ]
