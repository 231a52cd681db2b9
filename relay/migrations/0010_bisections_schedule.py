"""Schedule the advance of running bisections: a step whose run never reported ends inconclusive."""

from django.db import migrations

from ootci.schedules import schedule_installed


class Migration(migrations.Migration):
    dependencies = [("relay", "0009_sha_recheck_schedule")]
    operations = [
        schedule_installed(name="relay: advance bisections", func="relay.tasks.bisections_advance", minutes=10)
    ]
