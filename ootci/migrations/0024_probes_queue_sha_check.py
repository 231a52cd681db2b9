# Issue 26, items 4-6: the relay's probe, expected-outcome jobs, self-reported SHAs checked, workflow queue time.

from django.db import migrations, models

# The expected-outcome words and the conclusion each expects, as ootci.models.runs had them at this migration.
EXPECTED = {"xfail": "failure", "xcancel": "cancelled", "xtimeout": "timed_out"}


def named(word):
    return models.Q(job_name__iregex=rf"(^|[^a-z0-9]){word}([^a-z0-9]|$)")


def any_of(parts):
    found = models.Q()
    for part in parts:
        found |= part
    return found


OUTCOME = models.GeneratedField(
    db_persist=True,
    expression=models.Case(
        models.When(~models.Q(status="completed"), then=models.Value("running")),
        models.When(
            any_of(named(word) & models.Q(conclusion=c) for word, c in EXPECTED.items()), then=models.Value("success")
        ),
        models.When(any_of(named(word) for word in EXPECTED), then=models.Value("infra")),
        models.When(conclusion="success", then=models.Value("success")),
        models.When(conclusion__in=["skipped", "neutral"], then=models.Value("skipped")),
        models.When(failure_class__in=["test", "build", "lint"], then=models.Value("test")),
        models.When(failure_class="infra", then=models.Value("infra")),
        models.When(
            models.Q(conclusion="failure") & (models.Q(failed__gt=0) | ~models.Q(failed_tests=[])),
            then=models.Value("test"),
        ),
        default=models.Value("infra"),
    ),
    help_text="success (or an expected-outcome job's expected end); test failure (classified test/build/lint, else "
    "failure with failed tests); infra (any other end); running; skipped",
    output_field=models.CharField(
        choices=[
            ("success", "Success"),
            ("test", "test failure"),
            ("infra", "infrastructure failure"),
            ("running", "Running"),
            ("skipped", "Skipped"),
        ],
        max_length=10,
    ),
)


class Migration(migrations.Migration):
    dependencies = [("ootci", "0023_buildkite_pipelines")]

    operations = [
        migrations.AddField(
            model_name="backend",
            name="probe",
            field=models.BooleanField(
                default=False,
                help_text="The relay's own probe (e.g. pytorch/crcr-test): its results are the relay-health cards of "
                "the summary page, and it is left out of the backends' figures.",
            ),
        ),
        migrations.AddField(
            model_name="jobresult",
            name="dependency_wait",
            field=models.FloatField(
                blank=True,
                null=True,
                help_text="Waiting for dependencies: seconds from its run's first in_progress to its own (later jobs "
                "of a run)",
            ),
        ),
        migrations.AlterField(
            model_name="jobresult",
            name="queue_time",
            field=models.FloatField(
                blank=True,
                null=True,
                help_text="The workflow run's queue: seconds from dispatch sent to the run's first in_progress, kept "
                "on the job that started first (attempt 1)",
            ),
        ),
        migrations.AddField(
            model_name="jobresult",
            name="sha_check",
            field=models.CharField(
                blank=True,
                choices=[
                    ("verified", "a commit of the upstream repository"),
                    ("unverified", "not checked yet: GitHub was unreachable"),
                    ("unknown", "not a commit of the upstream repository (found on a re-check)"),
                ],
                max_length=10,
            ),
        ),
        # PostgreSQL cannot change a generated column's expression: it is dropped and added again (recomputed).
        migrations.RemoveField(model_name="jobresult", name="outcome"),
        migrations.AddField(model_name="jobresult", name="outcome", field=OUTCOME),
        # The unverified self-reports, for the re-check schedule (relay/migrations/0009).
        migrations.AddIndex(
            model_name="jobresult",
            index=models.Index(
                fields=["created_at"], condition=models.Q(sha_check="unverified"), name="job_sha_unverified"
            ),
        ),
    ]
