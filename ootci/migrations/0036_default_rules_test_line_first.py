"""The default failure rules after the fifteenth to seventeenth held-out sets (issue 24): a failed test's own line
(pytest's ``FAILED`` and ``ERROR`` lines, unittest's ``FAIL:``/``ERROR:`` header) over the device error, crash,
native assertion, collective timeout or JIT compiler error printed while the test ran — the choice the labellers
given the issue's rule made; and rules from how more tools print (compute-sanitizer, pytest-timeout, codespell and
typos, urllib, Node's connection errors, gh, xcrun, dyld, ninja's own errors, HSA and CANN device errors, a
registry's ``/v2/`` request failing under ``docker pull``, check_accuracy.py's verdicts, xdoctest, Gaudi's and
ROCm's missing devices). Same update as 0015: each default rule created or brought to the file's regex, class and
priority; the admin's own rules left alone."""

from importlib import import_module

from django.db import migrations

default_rules_update = import_module("ootci.migrations.0015_default_rules_re2").default_rules_update


class Migration(migrations.Migration):
    dependencies = [("ootci", "0035_testcase_history_reruns")]
    operations = [migrations.RunPython(default_rules_update, migrations.RunPython.noop)]
