"""Schedule the retention clean-up of raw job logs in the intermediate store."""

from django.db import migrations

from ootci.schedules import schedule_installed


class Migration(migrations.Migration):
    dependencies = [("relay", "0006_alerts_schedule")]
    operations = [
        schedule_installed(name="relay: clean job logs", func="relay.tasks.job_logs_clean", minutes=24 * 60)
    ]
