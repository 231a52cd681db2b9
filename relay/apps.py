from django.apps import AppConfig


class RelayConfig(AppConfig):
    name = "relay"

    def ready(self) -> None:
        from relay import checks  # noqa: F401 - registers the deployment checks
