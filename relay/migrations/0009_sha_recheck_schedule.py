"""Schedule the re-check of self-reported upstream SHAs accepted while GitHub could not be asked."""

from django.db import migrations

from ootci.schedules import schedule_installed


class Migration(migrations.Migration):
    dependencies = [("relay", "0008_reports_clean_task_name")]
    operations = [
        schedule_installed(name="relay: re-check unverified SHAs", func="relay.tasks.sha_checks_retry", minutes=10)
    ]
