"""The default failure rules after the sixth and seventh held-out sets (issue 24): a check's own "ERROR: … are not up
to date" line, Ascend's "no valid device" and a runner health check's "Failed to detect any GPUs" as infra, a docker
build that failed to resolve its base image, conda's own HTTP error over the connection error before it, a Sphinx
warning in a docs build run with -W. Same update as 0015: each default rule created or brought to the file's regex,
class and priority; the admin's own rules left alone."""

from importlib import import_module

from django.db import migrations

default_rules_update = import_module("ootci.migrations.0015_default_rules_re2").default_rules_update


class Migration(migrations.Migration):
    dependencies = [("ootci", "0025_environment_and_skip_ledger")]
    operations = [migrations.RunPython(default_rules_update, migrations.RunPython.noop)]
