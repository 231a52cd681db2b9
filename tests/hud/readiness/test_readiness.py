"""Readiness figures on hand-built histories, at each gate's edge, through the store (PostgreSQL), the page and the
JSON. Each gate's value must be strictly under its limit (ootci.gates)."""

from datetime import timedelta

import pytest

from hud.figures import queries
from ootci.models import GateNotice
from tests.hud.builders import ago, dispatch, job

pytestmark = pytest.mark.django_db


def pr_jobs(backend, n: int, *, finished=None, first: int = 0, **fields) -> None:
    """``n`` passing pull_request jobs, one upstream event each, 30 minutes from start to end, queued 60 s."""
    for i in range(first, first + n):
        fields_ = {"queue_time": 60.0, "execution_time": 1800.0} | fields
        job(
            backend,
            name=f"j{i}",
            event_type="pull_request",
            pr_number=i + 1,
            head_sha=f"{i:040d}",
            finished=finished or ago(hours=1),
            **fields_,
        )


def verdict(backend, now=None):
    return queries.readiness(now=now)[backend.id]


def gate(r, name: str, side: str = "promotion"):
    return next(g for g in getattr(r, f"{side}_gates") if g.gate.name == name)


@pytest.mark.parametrize(("second", "passed"), [(1800.0, True), (1801.0, False)])
def test_average_queue_time_must_be_under_30_minutes(make_backend, second, passed):
    backend = make_backend("q/npu", "L2")
    pr_jobs(backend, 1, queue_time=1799.0)
    job(backend, name="b", event_type="pull_request", pr_number=9, head_sha="9" * 40, queue_time=second)

    r = verdict(backend)

    assert gate(r, "queue_avg_minutes").passed is passed  # (1799 + 1801) / 2 = 1800 s is not under 30 minutes


@pytest.mark.parametrize(("jobs", "passed"), [(100, False), (101, True)])
def test_one_overrun_in_100_jobs_is_1_percent_and_fails(make_backend, jobs, passed):
    backend = make_backend("o/npu", "L2")
    pr_jobs(backend, jobs - 2)
    pr_jobs(backend, 1, execution_time=3 * 3600.0 + 1, workflow_name="long")  # over 3 h: an overrun
    job(backend, name="x", event_type="pull_request", pr_number=500, head_sha="5" * 40, execution_time=3 * 3600.0)

    r = verdict(backend)

    assert (r.promotion.total, r.promotion.overruns) == (jobs, 1)  # exactly 3 h is no overrun
    assert gate(r, "overrun_rate").passed is passed


@pytest.mark.parametrize(("jobs", "passed"), [(100, False), (101, True)])
def test_one_timeout_in_100_jobs_is_1_percent_and_fails(make_backend, jobs, passed):
    backend = make_backend("t/npu", "L2")
    pr_jobs(backend, jobs - 1)
    job(backend, name="slow", conclusion="timed_out", event_type="pull_request", pr_number=700, head_sha="7" * 40)

    r = verdict(backend)

    assert (r.promotion.total, r.promotion.timed_out, r.promotion.infra_failures) == (jobs, 1, 1)
    assert gate(r, "timeout_rate").passed is passed


@pytest.mark.parametrize(("longer", "passed"), [(0, True), (2, False)])
def test_end_to_end_median_per_upstream_event_must_be_under_3_hours(make_backend, longer, passed):
    backend = make_backend("e/npu", "L2")
    end = ago(hours=1)
    # Two upstream events: the first spans 2 h 59 m 59 s over two jobs (first start to last end), the second
    # 3 h 00 m 01 s or 2 h 59 m 59 s; the median of two is their mean.
    for name, start in (("a", end - timedelta(hours=2)), ("b", end - timedelta(hours=3) + timedelta(seconds=1))):
        job(
            backend,
            name=name,
            event_type="pull_request",
            pr_number=1,
            head_sha="1" * 40,
            finished=end,
            started_at=start,
        )
    start = end - timedelta(hours=3) - timedelta(seconds=longer - 1)
    job(backend, name="a", event_type="pull_request", pr_number=2, head_sha="2" * 40, finished=end, started_at=start)

    r = verdict(backend)

    assert r.promotion.e2e_p50 == (3 * 3600.0 if longer else 3 * 3600.0 - 1)
    assert gate(r, "e2e_p50_hours").passed is passed


def test_the_promotion_window_is_14_days_and_the_demotion_window_7(make_backend):
    backend = make_backend("w/npu", "L3")
    pr_jobs(backend, 3, finished=ago(days=10))
    job(
        backend,
        name="slow",
        conclusion="timed_out",
        event_type="pull_request",
        pr_number=9,
        head_sha="9" * 40,
        finished=ago(days=10),
    )
    pr_jobs(backend, 2, finished=ago(days=2), first=10)

    r = verdict(backend)

    assert (r.promotion.total, r.demotion.total) == (6, 2)
    assert gate(r, "timeout_rate", "promotion").passed is False  # L4's gates over 14 days
    assert gate(r, "timeout_rate", "demotion").passed is True  # its own L3 gates over 7 days
    assert r.verdict == "not-yet" and r.text == "not yet eligible for L4: 1 gate(s) not met"


def test_lost_dispatches_count_as_infra_failures_in_the_rates(make_backend):
    backend = make_backend("l/npu", "L2")
    pr_jobs(backend, 1)
    dispatch(backend, sha="3" * 40, at=ago(days=1))  # never called back

    r = verdict(backend)

    assert (r.promotion.total, r.promotion.infra_failures, r.promotion.success_rate) == (2, 1, 50.0)


def test_a_backend_failing_its_gates_is_at_risk_then_below_its_level(make_backend):
    backend = make_backend("r/npu", "L3")
    job(backend, name="slow", conclusion="timed_out", event_type="pull_request", pr_number=1, head_sha="1" * 40)
    now = ago(seconds=0)

    assert verdict(backend, now).verdict == "at-risk"  # no notice yet: it starts now
    monday = now - timedelta(days=now.weekday() + 7)  # a Monday: two working days later is Wednesday
    GateNotice.objects.create(backend=backend, failing_since=monday, gates=["timeout_rate"])
    r = verdict(backend, now)

    assert r.verdict == "below"
    assert r.text == f"below its level since {monday:%Y-%m-%d}, demotion due {monday + timedelta(days=2):%Y-%m-%d}"


def test_the_readiness_page_shows_each_gate_and_the_verdict(client, make_backend):
    backend = make_backend("acme/npu", "L2")
    pr_jobs(backend, 3)

    html = client.get("/oot/acme/npu/readiness/").content.decode()

    assert "eligible for L3" in html
    assert "average queue time" in html and "1 min" in html and "&lt; 30 min" in html
    assert "promotion to L3" in html and "14 days" in html


def test_the_readiness_json_gives_gates_values_and_verdict(client, make_backend):
    backend = make_backend("acme/npu", "L3")
    pr_jobs(backend, 3)

    data = client.get("/api/oot/acme/npu/readiness/").json()

    r = data["readiness"]
    assert (r["verdict"], r["target"], r["promotion"]["total"], r["demotion"]["days"]) == ("eligible", "L4", 3, 7)
    queue = r["demotion_gates"][0]
    assert (queue["gate"]["name"], queue["value"], queue["gate"]["limit"], queue["passed"]) == (
        "queue_avg_minutes",
        1.0,
        30.0,
        True,
    )
    assert backend.id == data["backend"]["id"]


def test_an_unknown_backend_has_no_readiness(client):
    assert client.get("/api/oot/no/such/readiness/").status_code == 404
    assert client.get("/oot/no/such/readiness/").status_code == 404


def test_settings_override_a_gate_limit(settings, make_backend):
    settings.LEVEL_GATES = {"L3": {"queue_avg_minutes": 0.5}}
    backend = make_backend("s/npu", "L2")
    pr_jobs(backend, 1)  # queued 60 s: over half a minute

    assert gate(verdict(backend), "queue_avg_minutes").passed is False
