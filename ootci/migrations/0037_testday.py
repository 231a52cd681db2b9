"""The test search's daily roll-up per test (TestDay, ``ootci.case_days``), and on PostgreSQL the trigram index the
search's ``icontains`` reads, as ``0010`` made for TestCase (pg_trgm is there since; the table is new and empty, so
the index is built in the transaction). Filled from the cases by ``0038``."""

from django.db import migrations, models

INDEX = "testday_test_id_trgm"


def trigram_index_create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"CREATE INDEX {INDEX} ON ootci_testday USING gin (UPPER(test_id::text) gin_trgm_ops)")


def trigram_index_drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [
        ("ootci", "0036_default_rules_test_line_first"),
    ]

    operations = [
        migrations.CreateModel(
            name="TestDay",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("test_id", models.CharField(max_length=1000)),
                ("day", models.DateField()),
                ("runs", models.PositiveIntegerField(default=0, help_text="Counted results: passes and failures")),
                ("failures", models.PositiveIntegerField(default=0)),
                (
                    "last_run",
                    models.DateTimeField(help_text="The latest arrival of a report with the test, any status"),
                ),
                ("last_failure", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "indexes": [models.Index(fields=["day"], name="testday_day")],
                "constraints": [models.UniqueConstraint(fields=("test_id", "day"), name="testday_unique_test_day")],
            },
        ),
        migrations.RunPython(trigram_index_create, trigram_index_drop),
    ]
