"""The default failure rules as of the RE2 engine and the failed-step scope (issue 24): each default rule is created
or brought to the file's regex, class and priority; rules the file does not name (the admin's own) are left alone."""

import tomllib
from pathlib import Path

from django.db import migrations
from django.utils import timezone

FIELDS = ("regex", "failure_class", "priority")


def default_rules_update(apps, schema_editor):
    """Ten migrations run this (0016 to 0036, each after a change to rules.toml), so it reads the rules in one query
    and writes only what differs: one ``update_or_create`` per rule took ~0.3 s a run, half of a fresh ``migrate``."""
    FailureRule = apps.get_model("ootci", "FailureRule")
    text = (Path(__file__).parent.parent / "failures" / "rules.toml").read_text()
    stated = {
        rule["name"]: {"regex": rule["regex"], "failure_class": rule["class"], "priority": rule["priority"]}
        for rule in tomllib.loads(text)["rule"]
    }
    existing = FailureRule.objects.in_bulk(list(stated), field_name="name")
    changed = []
    for name, fields in stated.items():
        rule = existing.get(name)
        if rule is not None and any(getattr(rule, field) != value for field, value in fields.items()):
            for field, value in fields.items():
                setattr(rule, field, value)
            rule.updated_at = timezone.now()
            changed.append(rule)
    FailureRule.objects.bulk_create([FailureRule(name=name, **stated[name]) for name in stated if name not in existing])
    FailureRule.objects.bulk_update(changed, [*FIELDS, "updated_at"])


class Migration(migrations.Migration):
    dependencies = [("ootci", "0014_failed_step_times")]
    operations = [migrations.RunPython(default_rules_update, migrations.RunPython.noop)]
