"""Tasks the broker could not take: kept in the database until Redis answers again (``ootci.broker``)."""

from django.db import models
from django.utils import timezone


class DeferredTask(models.Model):
    """A task whose enqueue failed because Redis did not answer (stopped, hanging, or resting after a failure): its
    signed package as django-q2 made it, queued again by the ``ootci: queue deferred tasks`` schedule once Redis
    answers. The same call (function and arguments) deferred again is kept once: a schedule that comes due every
    minute of an outage, or a check-run sync asked for twice, runs once afterwards (tasks are safe to run twice)."""

    call = models.CharField(max_length=64, unique=True, help_text="sha256 of the function and its arguments")
    func = models.CharField(max_length=255)
    queue = models.CharField(max_length=100, help_text="The broker's list the package goes to")
    payload = models.TextField(help_text="The signed task package")
    deferred_at = models.DateTimeField(default=timezone.now)
    # Held by the schedule pushing it to Redis (ootci.broker.deferred_requeue): a claim, never a lock across the push.
    claimed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.func} (deferred {self.deferred_at:%Y-%m-%d %H:%M:%S})"
