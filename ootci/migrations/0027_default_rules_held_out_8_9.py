"""The default failure rules after the eighth and ninth held-out sets (issue 24): run_test.py's "failed! Received
signal: SIGSEGV" summary no longer read as the crash itself (the FAILED line wins), pytest's ERROR line with its
duration over the per-test header, ptxas errors, sccache's server failing to start as infra, a benchmark's speedup
under its threshold, a "code format check failed" message. Same update as 0015: each default rule created or brought
to the file's regex, class and priority; the admin's own rules left alone."""

from importlib import import_module

from django.db import migrations

default_rules_update = import_module("ootci.migrations.0015_default_rules_re2").default_rules_update


class Migration(migrations.Migration):
    dependencies = [("ootci", "0026_default_rules_held_out_6_7")]
    operations = [migrations.RunPython(default_rules_update, migrations.RunPython.noop)]
