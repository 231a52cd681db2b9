"""The schedules the migrations install, installed again: tests that use the live server (transactional tests) empty
every table when they finish, migration data included, so a test that reads them cannot count on finding them."""

import importlib
import pkgutil

from django.apps import apps
from django.db import migrations


def schedules_installed() -> None:
    """Run again every data operation of the relay's and the HUD's migrations (each installs one schedule, with
    update_or_create, so running it again changes nothing)."""
    for app in ("relay", "hud"):
        package = importlib.import_module(f"{app}.migrations")
        for module in pkgutil.iter_modules(package.__path__):
            migration = importlib.import_module(f"{app}.migrations.{module.name}").Migration
            for operation in migration.operations:
                if isinstance(operation, migrations.RunPython):
                    operation.code(apps, None)
