"""The clean-up task of raw test reports is now ``relay.tasks.reports_clean`` (no product function is named test*)."""

from django.db import migrations

from ootci.schedules import schedule_renamed


class Migration(migrations.Migration):
    dependencies = [("relay", "0007_job_logs_clean_schedule")]
    operations = [schedule_renamed(old="relay.tasks.test_reports_clean", new="relay.tasks.reports_clean")]
