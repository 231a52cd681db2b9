"""Schedule the retention clean-up of raw test reports in the intermediate store."""

from django.db import migrations

from ootci.schedules import schedule_installed


class Migration(migrations.Migration):
    dependencies = [("relay", "0004_journal_replay_schedule")]
    operations = [
        schedule_installed(name="relay: clean test reports", func="relay.tasks.test_reports_clean", minutes=24 * 60)
    ]
