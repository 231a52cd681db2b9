"""The schedules the migrations install, installed again: tests that use the live server (transactional tests) empty
every table when they finish, migration data included, so a test that reads them cannot count on finding them."""

import importlib
import pkgutil

from django.apps import apps
from django.db import migrations


def schedules_installed() -> None:
    """Run again every data operation of the migrations (each installs one schedule, with
    update_or_create, so running it again changes nothing)."""
    for app in ("ootci", "relay", "hud"):
        package = importlib.import_module(f"{app}.migrations")
        for module in pkgutil.iter_modules(package.__path__):
            migration = importlib.import_module(f"{app}.migrations.{module.name}").Migration
            for operation in migration.operations:
                # ootci's migrations also install data that is not a schedule (default rules): those are left alone.
                if not isinstance(operation, migrations.RunPython):
                    continue
                if app != "ootci" or operation.code.__module__ == "ootci.schedules":
                    operation.code(apps, None)
