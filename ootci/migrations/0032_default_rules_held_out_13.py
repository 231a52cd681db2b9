"""The default failure rules after the thirteenth held-out set (issue 24): auditwheel's (or delocate's) ``error: cannot
repair``, a perf smoke test's ``speedup … is below the 1.15x threshold``, a runner script's ``did not finish within N
seconds``, ``Fatal Python error: Illegal instruction``, and docker's ``could not select device driver`` (no GPU
runtime). Same update as 0015: each default rule created or brought to the file's regex, class and priority; the
admin's own rules left alone."""

from importlib import import_module

from django.db import migrations

default_rules_update = import_module("ootci.migrations.0015_default_rules_re2").default_rules_update


class Migration(migrations.Migration):
    dependencies = [("ootci", "0031_default_rules_held_out_12")]
    operations = [migrations.RunPython(default_rules_update, migrations.RunPython.noop)]
