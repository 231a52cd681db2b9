"""The claim pattern (a conditional UPDATE instead of a lock held across a call out): whoever sets the claim field
first does the work; a claim older than ``stale`` is taken to belong to a worker that died."""

from datetime import datetime, timedelta

from django.db.models import Q, QuerySet
from django.utils import timezone


def claim(rows: QuerySet, field: str, *, stale: timedelta) -> datetime | None:
    """Claim ``rows`` (one row, as a queryset) by setting ``field`` to now: the claim's time, or None while another
    claim younger than ``stale`` holds it."""
    now = timezone.now()
    free = Q(**{f"{field}__isnull": True}) | Q(**{f"{field}__lt": now - stale})
    return now if rows.filter(free).update(**{field: now}) else None
