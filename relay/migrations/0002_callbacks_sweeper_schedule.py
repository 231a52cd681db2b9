"""Schedule the callback sweeper: jobs in progress past ZOMBIE_TIMEOUT_HOURS become timed_out (every 10 minutes)."""

from django.db import migrations

NAME = "relay: sweep zombie jobs"


def create(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name=NAME,
        defaults={"func": "relay.tasks.jobs_sweep", "schedule_type": "I", "minutes": 10, "repeats": -1},
    )


def remove(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("relay", "0001_dispatch_resend_schedule"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]
    operations = [migrations.RunPython(create, remove)]
