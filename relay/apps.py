from django.apps import AppConfig


class RelayConfig(AppConfig):
    name = "relay"
