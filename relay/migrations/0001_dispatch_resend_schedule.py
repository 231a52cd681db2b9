"""Schedule the sweeper that sends again pending dispatches whose task was lost (worker crash, lost message)."""

from django.db import migrations

NAME = "relay: resend stale dispatches"


def create(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name=NAME,
        defaults={"func": "relay.tasks.dispatches_resend_stale", "schedule_type": "I", "minutes": 1, "repeats": -1},
    )


def remove(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more")]
    operations = [migrations.RunPython(create, remove)]
