"""The default failure rules as of the RE2 engine and the failed-step scope (issue 24): each default rule is created
or brought to the file's regex, class and priority; rules the file does not name (the admin's own) are left alone."""

import tomllib
from pathlib import Path

from django.db import migrations


def default_rules_update(apps, schema_editor):
    FailureRule = apps.get_model("ootci", "FailureRule")
    text = (Path(__file__).parent.parent / "failures" / "rules.toml").read_text()
    for rule in tomllib.loads(text)["rule"]:
        FailureRule.objects.update_or_create(
            name=rule["name"],
            defaults={"regex": rule["regex"], "failure_class": rule["class"], "priority": rule["priority"]},
        )


class Migration(migrations.Migration):
    dependencies = [("ootci", "0014_failed_step_times")]
    operations = [migrations.RunPython(default_rules_update, migrations.RunPython.noop)]
