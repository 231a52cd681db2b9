from django.apps import AppConfig


class OotciConfig(AppConfig):
    name = "ootci"
    verbose_name = "Allowlist"

    def ready(self) -> None:
        from ootci.admin import alerts, backends, disabled, failures, governance, identities  # noqa: F401 (they register)
