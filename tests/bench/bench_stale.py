"""Stale-results benchmark (issue 27): a silent backend's incident opens within cadence + grace + 1 minute, and never
on a healthy month. The rules run as the every-minute schedule runs them (``relay.alerts.incidents.stale_evaluate``)
on simulated time: results are written as their time comes, and the rules asked at each step.

1. Fault tests: 30 backends (cadence 60 min, grace 10 min, in minutes so that the test runs in seconds) whose results
   stop at a random minute; the rules are asked every simulated minute after. Goal: each incident opens at most
   cadence + grace + 1 minute after the last result, in 100 % of them.
2. A healthy month: 3 backends reporting a nightly every 24 h, up to the grace late or early, for 30 days; the rules
   asked every 10 simulated minutes. Goal: no incident.
"""

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from ootci.models import Incident
from relay.alerts import incidents
from tests.hud import builders
from tests.relay.alerts.test_incidents import rules_installed

pytestmark = pytest.mark.django_db


def result(backend, at):
    return builders.job(backend, name="nightly", event_type="nightly", finished=at, created_at=at, started_at=at)


def test_a_silent_backend_is_seen_within_cadence_grace_and_a_minute(make_backend):
    rules_installed()
    rng, start = random.Random(27), timezone.now() - timedelta(days=3)
    cadence, grace = 60, 10
    opened_after = []
    for n in range(30):
        backend = make_backend(f"fault/b{n}", "L2", nightly_cadence_minutes=cadence, stale_grace_minutes=grace)
        last = start + timedelta(minutes=rng.randint(0, 600))
        result(backend, last)
        phase = timedelta(seconds=rng.randint(0, 59))  # the schedule's second within the minute
        for minute in range(cadence + grace - 3, cadence + grace + 5):
            incidents.stale_evaluate(now=last + phase + timedelta(minutes=minute))
            found = Incident.objects.filter(backend=backend, rule__kind="stale_results").first()
            if found:
                opened_after.append((found.opened_at - last).total_seconds() / 60)
                break
        backend.enabled = False  # out of the next backends' evaluations
        backend.save()
    within = sum(minutes <= cadence + grace + 1 for minutes in opened_after)
    print(
        f"\nsilent backends seen: {len(opened_after)} of 30; within cadence + grace + 1 min: {within} of 30; "
        f"latest {max(opened_after) - cadence - grace:.2f} min past cadence + grace"
    )
    assert len(opened_after) == 30 and within == 30


def test_a_healthy_month_opens_no_incident(make_backend):
    rules_installed()
    rng, start = random.Random(28), timezone.now() - timedelta(days=31)
    grace = 60
    backends = [make_backend(f"healthy/b{n}", "L2", stale_grace_minutes=grace) for n in range(3)]
    due = {b.pk: start + timedelta(minutes=rng.randint(-grace // 2, grace // 2)) for b in backends}
    evaluations = 0
    for step in range(30 * 24 * 6):
        now = start + timedelta(minutes=10 * step)
        for b in backends:
            if due[b.pk] <= now:
                result(b, due[b.pk])
                due[b.pk] += timedelta(days=1, minutes=rng.randint(-grace // 2, grace // 2))
        incidents.stale_evaluate(now=now)
        evaluations += 1
    opened = Incident.objects.filter(rule__kind="stale_results").count()
    print(f"\nhealthy month: {evaluations} evaluations of 3 backends, {opened} incidents (goal 0)")
    assert opened == 0
