"""Incidents open once per fingerprint, are brought up to date, and resolve (``relay.alerts.incidents`` holds the rules
that call these; ``relay.breaks.alerts`` the breaks'): what changed is handed to ``relay.alerts.notify``."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from ootci.models import AlertRule, Backend, Incident
from ootci.rows import columns, prepared_cursor, rows_as
from relay.alerts import notify

# Written out, as the callback's statements are: each completed job's follow-up asks for a rule and for a firing
# incident, and compiling these through the ORM cost more CPU than running them (tests/bench/bench_callback.py).
RULE = (
    f"SELECT {columns(AlertRule)} FROM {AlertRule._meta.db_table}"
    " WHERE kind = %s AND (backend_id = %s OR backend_id IS NULL) ORDER BY backend_id IS NULL, backend_id LIMIT 1"
)
FIRING = f"SELECT 1 FROM {Incident._meta.db_table} WHERE fingerprint = %s AND state = %s LIMIT 1"
FIRING_TOGETHER = 20  # fingerprints looked up in one statement (a fixed count: one prepared statement)
FIRING_AMONG = (
    f"SELECT fingerprint FROM {Incident._meta.db_table} WHERE state = %s"
    f" AND fingerprint IN ({', '.join(['%s'] * FIRING_TOGETHER)})"
)


def rule_for(kind: str, backend: Backend | None) -> AlertRule | None:
    """The rule of ``kind`` for ``backend``: its own when it has one, else the one for every backend."""
    found = rows_as(AlertRule, RULE, [kind, backend.pk if backend is not None else None])
    return found[0] if found and found[0].enabled else None


def firing(fingerprint: str) -> bool:
    """Whether the incident ``fingerprint`` fires (one statement, no lock)."""
    with prepared_cursor() as cursor:
        cursor.execute(FIRING, [fingerprint, Incident.State.FIRING.value])
        return cursor.fetchone() is not None


def firing_among(fingerprints: list[str]) -> dict[str, bool]:
    """Whether each of ``fingerprints`` fires, ``FIRING_TOGETHER`` of them a statement: for the bulk follow-up of
    successes, most of which find nothing firing."""
    unique = list(dict.fromkeys(fingerprints))
    fires = dict.fromkeys(unique, False)
    with prepared_cursor() as cursor:
        for start in range(0, len(unique), FIRING_TOGETHER):
            some = unique[start : start + FIRING_TOGETHER]
            padded = [*some, *[some[0]] * (FIRING_TOGETHER - len(some))]
            cursor.execute(FIRING_AMONG, [Incident.State.FIRING.value, *padded])
            fires.update((fingerprint, True) for (fingerprint,) in cursor.fetchall())
    return fires


# --- incidents: open once, update, resolve --------------------------------------------------------------------------


def incident_fire(
    rule: AlertRule,
    *,
    backend: Backend | None,
    fingerprint: str,
    what: str,
    details: dict,
    pr_number: int | None = None,
    now: datetime | None = None,
) -> str:
    """Open the incident ``fingerprint`` or bring its details up to date: "opened", "updated", "unchanged" or
    "cooling" (resolved less than the cooldown ago)."""
    now = now or timezone.now()
    firing = Incident.objects.filter(fingerprint=fingerprint, state=Incident.State.FIRING)
    with transaction.atomic():
        incident = firing.select_for_update().first()
        if incident is None:
            cooled = now - timedelta(minutes=rule.cooldown_minutes)
            if Incident.objects.filter(fingerprint=fingerprint, resolved_at__gt=cooled).exists():
                return "cooling"
            try:
                with transaction.atomic():
                    incident = Incident.objects.create(
                        rule=rule,
                        backend=backend,
                        fingerprint=fingerprint,
                        what=what,
                        details=details,
                        pr_number=pr_number,
                        opened_at=now,
                    )
            except IntegrityError:  # opened by a concurrent evaluation: update it
                incident = firing.select_for_update().get()
            else:
                notify.incident_notify(incident=incident, change="opened")
                return "opened"
        if (incident.what, incident.details, incident.greens) == (what, details, 0):
            return "unchanged"
        incident.what, incident.details, incident.greens = what, details, 0
        incident.save(update_fields=["what", "details", "greens"])
        notify.incident_notify(incident=incident, change="updated")
    return "updated"


def incident_green(
    fingerprint: str, *, resolve_after: int, details: dict | None = None, now: datetime | None = None
) -> str:
    """One green result (or check) for a firing incident: "resolved" after ``resolve_after`` in a row, else "green"
    ("quiet" when nothing fires)."""
    if not firing(fingerprint):  # most green results find nothing firing: no transaction, no lock
        return "quiet"
    with transaction.atomic():
        incident = Incident.objects.select_for_update().filter(fingerprint=fingerprint, state="firing").first()
        if incident is None:
            return "quiet"
        incident.greens += 1
        if details is not None:
            incident.details = details
        if incident.greens < resolve_after:
            incident.save(update_fields=["greens", "details"])
            if details is not None:
                notify.incident_notify(incident=incident, change="updated")
            return "green"
        incident.state, incident.resolved_at = Incident.State.RESOLVED, now or timezone.now()
        incident.save(update_fields=["greens", "details", "state", "resolved_at"])
        notify.incident_notify(incident=incident, change="resolved")
    return "resolved"
