"""Silent backends (ootci.staleness) and their incident (relay.alerts.incidents.stale_evaluate): a backend that stops
reporting is said to be silent within cadence + grace + 1 minute, and the next report ends it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ootci import staleness
from ootci.models import Backend, Incident
from relay.alerts import incidents
from tests.hud import builders
from tests.relay.alerts.test_incidents import rules_installed

pytestmark = pytest.mark.django_db

GRACE = 60  # minutes


@pytest.fixture
def npu(make_backend):
    backend = make_backend("acme/npu", "L2", device="npu", stale_grace_minutes=GRACE)
    Backend.objects.filter(pk=backend.pk).update(created_at=timezone.now() - timedelta(days=30))
    return Backend.objects.get(pk=backend.pk)


def nightly(backend, *, minutes_ago: float):
    at = timezone.now() - timedelta(minutes=minutes_ago)
    return builders.job(backend, name="nightly", event_type="nightly", finished=at, created_at=at)


@pytest.mark.parametrize(("minutes_ago", "silent"), [(1440 + GRACE - 1, False), (1440 + GRACE + 1, True)])
def test_a_nightly_older_than_cadence_and_grace_is_silence(npu, minutes_ago, silent):
    nightly(npu, minutes_ago=minutes_ago)
    now = timezone.now()

    found = staleness.silences([npu], now=now)

    assert (npu.pk in found) is silent
    if silent:
        assert found[npu.pk].event == "nightly" and found[npu.pk].text(now) == "silent for 25 h (no nightly result)"


def test_no_nightly_is_expected_of_a_backend_that_never_reported_one_nor_is_sent_one(npu):
    assert staleness.silences([npu], now=timezone.now()) == {}
    npu.events = ["pull_request", "nightly"]
    npu.save()
    assert staleness.silences([npu], now=timezone.now())[npu.pk].event == "nightly"  # its creation starts the clock


def test_five_pr_dispatches_without_a_callback_are_silence(npu):
    old = timezone.now() - timedelta(minutes=GRACE + 5)
    sent = [builders.dispatch(npu, sha=f"{n:040x}", at=old - timedelta(minutes=n)) for n in range(5)]

    found = staleness.silences([npu], now=timezone.now())
    assert found[npu.pk].unanswered == 5 and "PR dispatches got no callback" in found[npu.pk].text(timezone.now())

    builders.job(npu, name="ut", dispatch_=sent[2], event_type="pull_request")  # one of them was answered
    assert staleness.silences([npu], now=timezone.now()) == {}


def test_a_silent_backend_opens_an_incident_that_its_next_report_resolves(npu):
    rules_installed()
    nightly(npu, minutes_ago=1440 + GRACE + 1)

    assert incidents.periodic_evaluate(now=timezone.now())["stale"] == {"opened": 1}
    incident = Incident.objects.get(rule__kind="stale_results")
    assert incident.state == "firing" and incident.what == "acme/npu: silent for 25 h (no nightly result)"

    nightly(npu, minutes_ago=0)
    assert incidents.stale_evaluate(now=timezone.now()) == {"resolved": 1}
    assert Incident.objects.get(pk=incident.pk).state == "resolved"


def test_the_overview_and_the_backend_page_say_a_backend_is_silent(client, npu):
    nightly(npu, minutes_ago=31 * 60)

    overview = client.get("/oot/?event=nightly").content.decode()
    page = client.get("/oot/acme/npu/").content.decode()

    assert "silent for 31 h (no nightly result)" in overview
    assert "data-silent>silent for 31 h (no nightly result)" in page


def test_the_incidents_are_in_the_json_api(client, npu):
    rules_installed()
    nightly(npu, minutes_ago=1440 + GRACE + 1)
    incidents.stale_evaluate(now=timezone.now())

    [found] = client.get("/api/oot/incidents/", {"state": "firing", "kind": "stale_results"}).json()

    assert (found["kind"], found["backend"], found["state"], found["resolved"]) == (
        "stale_results",
        "acme/npu",
        "firing",
        None,
    )
    assert found["what"].startswith("acme/npu: silent for 25 h") and found["opened"]
    assert client.get("/api/oot/incidents/", {"state": "resolved"}).json() == []
    bad = client.get("/api/oot/incidents/", {"state": "maybe"})
    assert bad.status_code == 400 and "state must be one of" in bad.json()["detail"]


def test_the_badge_and_the_readiness_page_say_so_too(client, npu):
    nightly(npu, minutes_ago=31 * 60)

    badge = client.get("/oot/acme/npu/badge.svg").content.decode()
    readiness = client.get("/oot/acme/npu/readiness/").content.decode()

    assert "L2 · silent for 31 h" in badge
    assert "data-silent" in readiness and "silent for 31 h (no nightly result)" in readiness
