from django.apps import AppConfig


class RelayConfig(AppConfig):
    name = "relay"

    def ready(self) -> None:
        # relay.admin is found by the admin's autodiscovery; the test reports' admin lives in its own module.
        from relay import report_admin  # noqa: F401
