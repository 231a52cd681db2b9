"""Periodic django-q2 schedules that the project's migrations install (``migrate`` keeps them in place)."""

from django.db import migrations


def schedule_installed(*, name: str, func: str, minutes: int) -> migrations.RunPython:
    """A migration operation that installs (or updates) the schedule ``name`` running task ``func`` every ``minutes``,
    and removes it when migrated backwards."""

    def create(apps, schema_editor):
        apps.get_model("django_q", "Schedule").objects.update_or_create(
            name=name, defaults={"func": func, "schedule_type": "I", "minutes": minutes, "repeats": -1}
        )

    def remove(apps, schema_editor):
        apps.get_model("django_q", "Schedule").objects.filter(name=name).delete()

    operation = migrations.RunPython(create, remove)
    operation.schedule = {"name": name, "func": func, "minutes": minutes}  # what it installs, for the tests' flush
    return operation


def schedule_renamed(*, old: str, new: str) -> migrations.RunPython:
    """A migration operation that points the schedules running task ``old`` at its new name ``new`` (and back)."""

    def rename(from_func: str, to_func: str):
        def run(apps, schema_editor):
            apps.get_model("django_q", "Schedule").objects.filter(func=from_func).update(func=to_func)

        return run

    return migrations.RunPython(rename(old, new), rename(new, old))
