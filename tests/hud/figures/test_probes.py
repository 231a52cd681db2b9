"""The relay's probe (issue 26): its health cards on the summary page — pull requests (its last 5 PRs) and nightly (its
last 5 nightly SHAs), Healthy or Degraded with the reason — and the probe left out of the backends' figures."""

from datetime import timedelta

import pytest
from django.utils import timezone

from hud.figures import queries
from tests.hud.builders import ago, dispatch, job, pull_request

pytestmark = pytest.mark.django_db


def probe_with_prs(make_backend, *, n: int = 5, first: int = 100, **fields):
    """A probe whose last ``n`` PRs each ran its expected-outcome jobs, all as expected."""
    probe = make_backend("pytorch/crcr-test", "L2", probe=True, **fields)
    for i in range(n):
        sha = f"{first + i:040x}"
        d = dispatch(probe, sha=sha, at=ago(hours=n - i + 1), pr=pull_request(first + i, sha))
        for name, conclusion in (("build", "success"), ("xfail", "failure"), ("xcancel", "cancelled")):
            job(probe, name=name, conclusion=conclusion, dispatch_=d, finished=ago(hours=n - i))
    return probe


def nightlies(probe, *, n: int = 5, newest=None):
    newest = newest or ago(hours=2)
    for i in range(n):
        sha = f"{0xABC0 + i:040x}"
        finished = newest - timedelta(days=n - 1 - i)
        job(probe, name="nightly-ok", conclusion="success", head_sha=sha, finished=finished)
        job(probe, name="xtimeout", conclusion="timed_out", head_sha=sha, finished=finished)


def cards(probe):
    found = {c.kind: c for c in queries.probe_cards(now=timezone.now()) if c.probe.id == probe.id}
    return found["pull_request"], found["nightly"]


def test_a_probe_whose_samples_all_met_their_expectations_is_healthy(make_backend, client):
    probe = probe_with_prs(make_backend)
    nightlies(probe)

    prs, nightly = cards(probe)

    assert (prs.state, nightly.state) == ("Healthy", "Healthy")
    assert [s.pr_number for s in prs.samples] == [104, 103, 102, 101, 100]
    assert all(s.ok and s.jobs == 3 for s in prs.samples) and len(nightly.samples) == 5
    assert prs.reason == "the last 5 pull requests of pytorch/crcr-test: every outcome as expected"
    page = client.get("/oot/").content.decode()
    assert 'data-probe="pytorch/crcr-test"' in page and page.count('<span class="badge ok">Healthy</span>') == 2
    api = client.get("/api/oot/").json()
    assert [(c["kind"], c["state"]) for c in api["probes"]] == [("pull_request", "Healthy"), ("nightly", "Healthy")]


def test_one_unexpected_outcome_among_the_last_5_prs_degrades_the_card(make_backend, client):
    probe = probe_with_prs(make_backend, n=6)
    older = probe.job_results.get(pr_number=100, job_name="build")
    probe.job_results.filter(pk=older.pk).update(conclusion="failure")  # the 6th PR back: not a sample any more
    assert cards(probe)[0].state == "Healthy"
    xfail = probe.job_results.get(pr_number=103, job_name="xfail")
    probe.job_results.filter(pk=xfail.pk).update(conclusion="success")  # an expected failure passed

    prs, _ = cards(probe)

    assert prs.state == "Degraded"
    assert prs.reason == "PR #103: unexpected outcome of ci / xfail (success)"
    assert [s.ok for s in prs.samples] == [True, True, False, True, True]
    page = client.get("/oot/").content.decode()
    assert "PR #103: unexpected outcome of ci / xfail (success)" in page


def test_a_pr_dispatch_unanswered_past_the_grace_degrades_the_card(make_backend):
    probe = probe_with_prs(make_backend, n=4, stale_grace_minutes=60)
    sha = "e" * 40
    dispatch(probe, sha=sha, at=ago(minutes=90), pr=pull_request(200, sha))

    prs, _ = cards(probe)

    assert prs.state == "Degraded"
    assert prs.reason == "PR #200: dispatched 90 min ago, no result within 60 min"
    sha = "d" * 40
    dispatch(probe, sha=sha, at=ago(minutes=10), pr=pull_request(201, sha))  # still within its grace: not late
    assert cards(probe)[0].samples[0].missing == ""


def test_a_nightly_older_than_its_cadence_degrades_the_card(make_backend):
    probe = probe_with_prs(make_backend, nightly_cadence_minutes=1440, stale_grace_minutes=120)
    nightlies(probe, newest=ago(hours=27))

    _, nightly = cards(probe)

    assert nightly.state == "Degraded"
    assert nightly.reason == "no nightly result for 27 h (expected every 24 h)"


def test_an_unexpected_nightly_outcome_degrades_the_card(make_backend):
    probe = probe_with_prs(make_backend)
    nightlies(probe)
    job(probe, name="xtimeout", conclusion="success", head_sha=f"{0xABC2:040x}", run_id="again", finished=ago(hours=1))

    _, nightly = cards(probe)

    assert nightly.state == "Degraded"
    assert nightly.reason.startswith(f"{0xABC2:040x}"[:12] + ": unexpected outcome of ci / xtimeout (success)")


def test_a_probe_without_results_is_degraded_and_no_probe_means_no_cards(make_backend, client):
    assert queries.probe_cards(now=timezone.now()) == []
    assert "data-probe" not in client.get("/oot/").content.decode()
    probe = make_backend("pytorch/crcr-test", "L2", probe=True)

    prs, nightly = cards(probe)

    assert (prs.state, prs.reason) == ("Degraded", "no pull request results from pytorch/crcr-test yet")
    assert (nightly.state, nightly.reason) == ("Degraded", "no nightly results from pytorch/crcr-test yet")


def test_the_probe_is_left_out_of_the_backends_figures(make_backend, client):
    probe = probe_with_prs(make_backend)
    npu = make_backend("ascend/npu", "L2")
    job(npu, name="build", event_type="pull_request", pr_number=104, head_sha=f"{104:040x}")

    overview = queries.overview(days=7, event="pull_request", now=timezone.now())

    assert [row.backend.repo for rows in overview.sections.values() for row in rows] == ["ascend/npu"]
    assert probe.repo not in [b.repo for b in overview.listed]
    assert [m.backend.repo for m in queries.metrics(days=7, event="pull_request", now=timezone.now())] == ["ascend/npu"]
    pr = queries.pull_request(104)
    assert [g.backend.repo for g in pr.groups] == ["ascend/npu"]
    table = client.get("/oot/").content.decode().split('data-probe="pytorch/crcr-test"')[1]
    assert "pytorch/crcr-test/readiness/" not in table  # no row of its own in a level table
    assert client.get("/oot/pytorch/crcr-test/").status_code == 200  # its own page stays, linked from the cards
