"""Breaks (issue 28): a baseline run's new failures open a break, its suspects are ranked from GitHub's compare and
the relay's own PR-time runs, one break across backends, the compare cached, flaky tests kept out, the incident and
issue edited in place, closed by a green baseline run."""

from datetime import timedelta

import pytest

from ootci.models import AlertRule, Break, BreakTest, Incident, NotificationChannel, Suspect, TestReport
from tests.hud import builders
from tests.hud.failing_history import generic_id
from tests.relay.breaks.history import BAD, GOOD, green, nightly, pr_run, sha

pytestmark = pytest.mark.django_db


def test_a_new_failure_opens_a_break_with_suspects_ranked_by_tier(
    make_backend, upstream_history, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    backend = make_backend("acme/npu", "L2")
    nightly(backend, GOOD, green(), capture, hours=30)
    pr_run(backend, 11, green() | {"t1": "failed"}, capture, hours=20)
    pr_run(backend, 14, green(), capture, hours=18)
    nightly(backend, BAD, green() | {"t1": "failed"}, capture, hours=5)

    brk = Break.objects.get()
    assert (brk.good_sha, brk.bad_sha, brk.state) == (GOOD, BAD, "open")
    assert list(brk.tests.values_list("test_id", flat=True)) == [generic_id("t1")]
    assert brk.commits == [sha(0xA1), sha(0xA2), sha(0xA3), sha(0xA4), BAD]
    ranked = list(Suspect.objects.filter(brk=brk).values_list("pr_number", "tier"))
    assert ranked == [(11, "strong"), (12, "medium"), (15, "untested"), (13, "untested"), (14, "passed")]
    strong = Suspect.objects.get(brk=brk, pr_number=11)
    assert strong.evidence[0]["url"] == "https://github.com/acme/npu/actions/runs/911"
    assert "AssertionError: boom" in strong.evidence[0]["line"]
    assert strong.url == "https://github.com/pytorch/pytorch/pull/11"
    assert "touched torch/_ops.py" in Suspect.objects.get(brk=brk, pr_number=12).evidence[0]["text"]


def test_a_failure_new_on_several_backends_at_the_same_commit_is_one_break(
    make_backend, upstream_history, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    a, b = make_backend("acme/npu", "L2"), make_backend("other/xpu", "L2")
    for backend in (a, b):
        nightly(backend, GOOD, green(), capture, hours=30)
    nightly(a, BAD, green() | {"t1": "failed"}, capture, hours=5)
    nightly(b, BAD, green() | {"t1": "failed", "t2": "failed"}, capture, hours=4)

    brk = Break.objects.get()
    assert sorted(brk.tests.values_list("backend__repo", "test_id")) == [
        ("acme/npu", generic_id("t1")),
        ("other/xpu", generic_id("t1")),
        ("other/xpu", generic_id("t2")),
    ]
    # The range and each commit were asked of GitHub once, whatever the number of backends and rankings.
    assert len(upstream_history.requests_to("GET", r"/repos/pytorch/pytorch/compare/.*")) == 1
    assert len(upstream_history.requests_to("GET", rf"/repos/pytorch/pytorch/commits/{sha(0xA2)}/pulls")) == 1
    assert Suspect.objects.filter(brk=brk).count() == 5


def test_a_test_known_to_be_flaky_opens_no_break(make_backend, upstream_history, django_capture_on_commit_callbacks):
    capture = django_capture_on_commit_callbacks
    backend = make_backend("acme/npu", "L2")
    for n in range(8):  # t3 flips on every run: its flakiness is known, well over the threshold
        nightly(backend, f"{0xB0 + n:040x}", green() | {"t3": "failed" if n % 2 else "passed"}, capture, hours=60 - n)
    nightly(backend, GOOD, green(), capture, hours=30)
    nightly(backend, BAD, green() | {"t3": "failed"}, capture, hours=5)
    # Its first flips, before its flakiness was known (under 5 results), may have; this one, once known, does not.
    assert not Break.objects.filter(bad_sha=BAD).exists()


def test_a_break_fires_the_incident_its_issue_follows_the_suspects_and_a_green_run_closes_it(
    make_backend, upstream_history, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    AlertRule.objects.get_or_create(kind="baseline_failures", backend=None, defaults={"threshold": 3})
    backend = make_backend("acme/npu", "L2")
    NotificationChannel.objects.create(backend=backend, kind="repo_issue")
    nightly(backend, GOOD, green(), capture, hours=30)
    pr_run(backend, 11, green() | {"t1": "failed"}, capture, hours=20)
    nightly(backend, BAD, green() | {"t1": "failed"}, capture, hours=5)

    incident = Incident.objects.get(fingerprint__contains=":break:")
    assert incident.state == "firing" and "1 test(s) newly failing" in incident.what and "#11 (strong)" in incident.what
    issue = upstream_history.issues["acme/npu", 1]
    assert "#11 PR 11" in issue["body"] and "strong" in issue["body"] and "test_x.py::TestX::t1" in issue["body"]

    fixed = nightly(backend, "ab" * 20, green(), capture, hours=1)
    brk = Break.objects.get()
    assert brk.state == "closed" and "ababababab" in brk.closed_note and fixed.run_url in brk.closed_note
    assert BreakTest.objects.get().fixed_job == fixed
    incident.refresh_from_db()
    assert incident.state == "resolved"
    assert issue["state"] == "closed" and f"passed again in the nightly run at {'ab' * 6}" in issue["body"]


def test_a_report_parsed_again_opens_no_second_break(
    make_backend, upstream_history, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    backend = make_backend("acme/npu", "L2")
    nightly(backend, GOOD, green(), capture, hours=30)
    job = nightly(backend, BAD, green() | {"t1": "failed"}, capture, hours=5)
    from relay.breaks import detect

    assert detect.breaks_after_report(job_id=job.pk) == "0 new failing, 0 fixed"
    assert Break.objects.count() == 1 and BreakTest.objects.count() == 1
    assert TestReport.objects.filter(job=job).count() == 1


def test_github_down_ranks_the_suspects_later(make_backend, upstream_history, django_capture_on_commit_callbacks):
    from django_q.models import Schedule

    from tests.fakes.github import Reply

    capture = django_capture_on_commit_callbacks
    backend = make_backend("acme/npu", "L2")
    nightly(backend, GOOD, green(), capture, hours=30)
    upstream_history.outage = Reply(502, {"message": "Server Error"})
    nightly(backend, BAD, green() | {"t1": "failed"}, capture, hours=5)
    assert Break.objects.get().suspects_at is None
    assert Schedule.objects.filter(func="relay.tasks.break_suspects").exists()
    upstream_history.outage = None
    from relay.breaks import suspects

    assert suspects.break_suspects(break_id=Break.objects.get().pk, attempt=2) == "5 suspects of 5 commits"
    assert Break.objects.get().suspects_at > builders.ago(minutes=1) - timedelta(seconds=0)
