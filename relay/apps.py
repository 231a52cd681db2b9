import importlib
import sys

from django.apps import AppConfig


class RelayConfig(AppConfig):
    name = "relay"

    def ready(self) -> None:
        from relay import checks  # noqa: F401 - registers the deployment checks

        if sys.argv[1:2] == ["qcluster"]:
            # django-q2 forks its workers from this process and replaces each after Q_CLUSTER["recycle"] tasks. A
            # worker imports a task's module by its dotted name on its first task (about 100 modules, 85 ms of CPU,
            # per worker and per recycle); imported by that name here, the modules come with every fork.
            importlib.import_module("relay.tasks")
