"""The default failure rules after the eleventh held-out set (issue 24): the process group's own watchdog line
(``ProcessGroupNCCL.cpp:N] [Rank R] Watchdog caught collective operation timeout``) over the FAILED line of the test
it hung, a benchmark's ``model: fail_accuracy (expected pass)``, "No ROCm GPUs detected" as no device, and a low
fallback for a line that says it is an error (``ERROR: …``, ``fatal: …``, glog's ``E1014 …]``), above the runner's
generic exit-code line. Same update as 0015: each default rule created or brought to the file's regex, class and
priority; the admin's own rules left alone."""

from importlib import import_module

from django.db import migrations

default_rules_update = import_module("ootci.migrations.0015_default_rules_re2").default_rules_update


class Migration(migrations.Migration):
    dependencies = [("ootci", "0029_default_rules_held_out_10")]
    operations = [migrations.RunPython(default_rules_update, migrations.RunPython.noop)]
