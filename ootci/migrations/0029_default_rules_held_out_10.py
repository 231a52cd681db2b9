"""The default failure rules after the tenth held-out set (issue 24): a pytest-xdist worker's crash named by its
FAILED line over the crash report, a code generator's assertion over the ninja target that ran it, a perf smoke
test's "speedup … is below the expected threshold", a linter's own line over pre-commit's "Failed". Same update as
0015: each default rule created or brought to the file's regex, class and priority; the admin's own rules left
alone."""

from importlib import import_module

from django.db import migrations

default_rules_update = import_module("ootci.migrations.0015_default_rules_re2").default_rules_update


class Migration(migrations.Migration):
    dependencies = [("ootci", "0028_breaks")]
    operations = [migrations.RunPython(default_rules_update, migrations.RunPython.noop)]
