"""Schedule the periodic alert rules: relay health and the readiness gates, every minute."""

from django.db import migrations

from ootci.schedules import schedule_installed


class Migration(migrations.Migration):
    dependencies = [
        ("relay", "0005_test_reports_clean_schedule"),
        ("ootci", "0008_alerts"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]
    operations = [schedule_installed(name="relay: evaluate alert rules", func="relay.tasks.alerts_periodic", minutes=1)]
