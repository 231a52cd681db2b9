"""A trigram index for the test search (``hud.stores.db.history``: ``test_id__icontains``), on PostgreSQL only.

Django's ``icontains`` is ``UPPER(test_id::text) LIKE UPPER('%…%')``; a GIN index of ``pg_trgm`` trigrams over that
expression answers it without reading every case. SQLite (``make run``) has neither, and needs neither, so the index is
made here rather than declared on the model (the model state stays the same on both databases). Built
``CONCURRENTLY`` (outside a transaction) so that a large TestCase table keeps taking writes meanwhile.
"""

from django.db import migrations

INDEX = "testcase_test_id_trgm"


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON ootci_testcase USING gin (UPPER(test_id::text) gin_trgm_ops)"
    )


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ootci", "0009_disabled_tests"),
    ]

    operations = [migrations.RunPython(create, drop)]
