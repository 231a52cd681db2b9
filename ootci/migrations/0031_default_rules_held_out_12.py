"""The default failure rules after the twelfth held-out set (issue 24): gcc's internal compiler error, an Xid kernel
line (a GPU fallen off the bus) over nvidia-smi's failure, black's ``reformatted <file>``, and rules written from how
more tools print: nvcc's ``fatal``, ``ld: cannot find -l…``, curl and wget downloads, shellcheck, pyright, clang-tidy,
a workflow token or action GitHub refuses, AWS's ``An error occurred (AccessDenied)``, native assertions (a CUDA
device assert, Metal's ``failed assertion``), Windows' access violation and other fatal signals. Same update as 0015:
each default rule created or brought to the file's regex, class and priority; the admin's own rules left alone."""

from importlib import import_module

from django.db import migrations

default_rules_update = import_module("ootci.migrations.0015_default_rules_re2").default_rules_update


class Migration(migrations.Migration):
    dependencies = [("ootci", "0030_default_rules_held_out_11")]
    operations = [migrations.RunPython(default_rules_update, migrations.RunPython.noop)]
