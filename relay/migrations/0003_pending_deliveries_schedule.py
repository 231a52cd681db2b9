"""Schedule the finishing of pending deliveries: a label's check-run backfill or a re-run whose task was lost."""

from django.db import migrations

from ootci.schedules import schedule_installed


class Migration(migrations.Migration):
    dependencies = [
        ("relay", "0002_callbacks_sweeper_schedule"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]
    operations = [
        schedule_installed(
            name="relay: finish pending deliveries", func="relay.tasks.deliveries_finish_pending", minutes=1
        )
    ]
