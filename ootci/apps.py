from django.apps import AppConfig


class OotciConfig(AppConfig):
    name = "ootci"
    verbose_name = "Allowlist"
