"""Schedule the replay of requests journaled while PostgreSQL was down (relay.reliability.journal)."""

from django.db import migrations

from ootci.schedules import schedule_installed


class Migration(migrations.Migration):
    dependencies = [
        ("relay", "0003_pending_deliveries_schedule"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]
    operations = [schedule_installed(name="relay: replay the journal", func="relay.tasks.journal_replay", minutes=1)]
