"""Run hud.tasks.figures_refresh every minute: the figures the HUD pages show by default, computed ahead of requests."""

from django.db import migrations

NAME = "hud: refresh the default figures"


def add_schedule(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name=NAME,
        defaults={"func": "hud.tasks.figures_refresh", "schedule_type": "I", "minutes": 1, "repeats": -1},
    )


def remove_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [("hud", "0002_clickhouse_replicate_schedule")]

    operations = [migrations.RunPython(add_schedule, remove_schedule)]
