"""The default failure rules after the third and fourth held-out sets (issue 24): the FAILED summary line over the
per-test header and PyTorch's FAILED CONSISTENTLY, the exception line of a collection error, no scheduling event as a
pod failure, a C++ exception's what(), uv's root cause, pre-commit hooks, packaging errors, pip conflicts; after the
fifth: bazel, rustc, MSVC's linker, actionlint, the Hugging Face Hub, missing device nodes, GPU memory faults, NCCL
watchdog timeouts, benchmark accuracy lines, unittest class set-up errors. Same update as 0015: each
default rule created or brought to the file's regex, class and priority; the admin's own rules left alone."""

from importlib import import_module

from django.db import migrations

default_rules_update = import_module("ootci.migrations.0015_default_rules_re2").default_rules_update


class Migration(migrations.Migration):
    dependencies = [("ootci", "0015_default_rules_re2")]
    operations = [migrations.RunPython(default_rules_update, migrations.RunPython.noop)]
