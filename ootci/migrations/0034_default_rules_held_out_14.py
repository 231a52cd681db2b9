"""The default failure rules after the fourteenth held-out set (issue 24): the Apple linker's ``Undefined symbols for
architecture arm64:`` and its quoted symbol over ninja's ``FAILED:`` target, and actionlint's own ``file:line:col:``
line over lintrunner's ``Error (ACTIONLINT)`` header. Same update as 0015: each default rule created or brought to the
file's regex, class and priority; the admin's own rules left alone."""

from importlib import import_module

from django.db import migrations

default_rules_update = import_module("ootci.migrations.0015_default_rules_re2").default_rules_update


class Migration(migrations.Migration):
    dependencies = [("ootci", "0033_job_newer_finish")]
    operations = [migrations.RunPython(default_rules_update, migrations.RunPython.noop)]
