"""The upstream events the relay handles: relayed (pull_request, push) or self-reported by a backend's CI (nightly,
periodic). A leaf, as ``ootci.levels`` is: the models and both rooms read it."""

from django.db import models


class Event(models.TextChoices):
    PULL_REQUEST = "pull_request"
    PUSH = "push"
    NIGHTLY = "nightly"
    PERIODIC = "periodic"
