"""Schedule the finishing of pending deliveries: a label's check-run backfill or a re-run whose task was lost."""

from django.db import migrations

NAME = "relay: finish pending deliveries"


def create(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name=NAME,
        defaults={"func": "relay.tasks.deliveries_finish_pending", "schedule_type": "I", "minutes": 1, "repeats": -1},
    )


def remove(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("relay", "0002_callbacks_sweeper_schedule"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]
    operations = [migrations.RunPython(create, remove)]
