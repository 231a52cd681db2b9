"""Bisection on demand (issue 28): the rule's midpoints, skips and stops; the dispatches of event bisect and their
client payload; the steps decided by their jobs' reports; the daily cap; who may ask."""

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone
from django_q.models import Schedule

from ootci import breaks as rules
from ootci.models import BisectStep, Break, BreakTest, Dispatch, JobResult
from relay.breaks import bisect
from tests.fakes.oidc import reporter_body
from tests.hud import builders
from tests.hud.failing_history import generic_id
from tests.relay.breaks.history import BAD, GOOD, green, nightly, report

COMMITS = [f"{n:040x}" for n in range(1, 101)]


def bisected(culprit: int, *, known=None) -> tuple[str, int]:
    """Run the rule against a truth where commits from ``culprit`` on fail; the culprit found and dispatches."""
    known, n = dict(known or {}), 0
    while True:
        found = rules.bisect_next(COMMITS, known, inconclusive=0)
        if found.done:
            return found.culprit, n
        n += 1
        known[found.sha] = rules.BAD if COMMITS.index(found.sha) >= culprit else rules.GOOD


@pytest.mark.parametrize("culprit", [0, 1, 37, 50, 98, 99])
def test_a_bisection_over_100_commits_ends_at_the_culprit_in_at_most_7_dispatches(culprit):
    found, n = bisected(culprit)
    assert found == COMMITS[culprit] and n <= 7


def test_commits_already_tested_are_not_dispatched_again():
    # A baseline run already passed commit 60: the search starts above it and needs fewer dispatches.
    found, n = bisected(70, known={COMMITS[60]: rules.GOOD})
    assert found == COMMITS[70] and n <= 6
    assert rules.bisect_next(COMMITS, {COMMITS[49]: rules.GOOD}, inconclusive=0).sha != COMMITS[49]


def test_an_inconclusive_commit_is_skipped_and_a_second_stops_the_bisection():
    first = rules.bisect_next(COMMITS, {}, inconclusive=0)
    after = rules.bisect_next(COMMITS, {first.sha: rules.INCONCLUSIVE}, inconclusive=1)
    assert not after.done and after.sha != first.sha
    stopped = rules.bisect_next(COMMITS, {first.sha: rules.INCONCLUSIVE, after.sha: rules.INCONCLUSIVE}, inconclusive=2)
    assert stopped.done and not stopped.culprit and "inconclusive twice" in stopped.why


@pytest.fixture
def broken(make_backend, upstream_history, django_capture_on_commit_callbacks):
    backend = make_backend("acme/npu", "L2", bisect=True)
    nightly(backend, GOOD, green(), django_capture_on_commit_callbacks, hours=30)
    nightly(backend, BAD, green() | {"t1": "failed"}, django_capture_on_commit_callbacks, hours=5)
    return Break.objects.get()


def maintainer() -> User:
    user = User.objects.create_user("mia", password="x")
    user.user_permissions.add(Permission.objects.get(codename="change_dispatch"))
    return User.objects.get(pk=user.pk)


@pytest.mark.django_db
def test_a_maintainer_starts_a_bisection_dispatched_as_event_bisect_with_the_candidate_sha(
    client, broken, upstream_history, django_capture_on_commit_callbacks
):
    client.force_login(maintainer())
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/api/oot/acme/npu/breaks/{broken.pk}/bisect/")
    assert response.status_code == 202, response.content
    sent = upstream_history.dispatches()
    assert len(sent) == 1 and sent[0].json["event_type"] == "bisect"
    payload = sent[0].json["client_payload"]
    step = BisectStep.objects.get()
    assert payload["sha"] == step.sha == broken.commits[(-1 + 4) // 2]  # the midpoint of (GOOD, BAD]
    assert payload["event_type"] == "bisect" and payload["delivery_id"] == step.dispatch.delivery.delivery_id
    assert payload["payload"]["bisect"]["tests"] == [generic_id("t1")]
    assert Break.objects.get().bisection == "running"


@pytest.mark.django_db
def test_a_downstream_echoing_the_bisect_payload_reports_through_the_same_callback(
    client, broken, upstream_history, oidc_issuer, django_capture_on_commit_callbacks
):
    backend = broken.tests.get().backend
    with django_capture_on_commit_callbacks(execute=True):
        bisect.bisect_request(break_id=broken.pk, backend=backend)
    payload = upstream_history.dispatches()[0].json["client_payload"]
    body = reporter_body("pull_request.in_progress", callback_token=payload["callback_token"])
    body |= {k: payload[k] for k in ("event_type", "delivery_id", "payload")}  # echoed as the workflow received it

    answer = client.post(
        "/github/callback",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {oidc_issuer.token(repository=backend.repo)}"},
    )

    assert answer.status_code == 200, answer.content
    job = JobResult.objects.get(dispatch=BisectStep.objects.get().dispatch)
    assert (job.event_type, job.status) == ("bisect", "in_progress")


@pytest.mark.django_db
def test_each_step_is_decided_by_its_jobs_report_until_one_commit_is_left(
    broken, upstream_history, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    backend = broken.tests.get().backend
    culprit = broken.commits.index(f"{0xA2:02x}" * 20)  # PR 12's commit broke it
    with capture(execute=True):
        bisect.bisect_request(break_id=broken.pk, backend=backend)
    for _ in range(5):
        step = BisectStep.objects.filter(state="dispatched").first()
        if step is None:
            break
        fails = broken.commits.index(step.sha) >= culprit
        job = builders.job(
            backend, name="test-1", conclusion="failure" if fails else "success", dispatch_=step.dispatch
        )
        report(job, green() | ({"t1": "failed"} if fails else {}), capture)
    brk = Break.objects.get()
    assert (brk.bisection, brk.culprit_sha) == ("found", broken.commits[culprit])
    assert BisectStep.objects.count() <= 3
    assert list(BisectStep.objects.values_list("state", flat=True)).count("dispatched") == 0


@pytest.mark.django_db
def test_a_bisection_stops_at_the_daily_cap(settings, broken, django_capture_on_commit_callbacks):
    settings.BISECT_DAILY_CAP = 1
    backend = broken.tests.get().backend
    with django_capture_on_commit_callbacks(execute=True):
        bisect.bisect_request(break_id=broken.pk, backend=backend)
        step = BisectStep.objects.get()
        job = builders.job(backend, name="test-1", conclusion="success", dispatch_=step.dispatch)
        report(job, green(), django_capture_on_commit_callbacks)
    brk = Break.objects.get()
    assert brk.bisection == "capped" and "1 bisection dispatches in 24 h" in brk.bisect_note
    assert Dispatch.objects.count() == 1


@pytest.mark.django_db
def test_a_job_that_ends_without_a_result_twice_stops_the_bisection(broken, django_capture_on_commit_callbacks):
    backend = broken.tests.get().backend
    with django_capture_on_commit_callbacks(execute=True):
        bisect.bisect_request(break_id=broken.pk, backend=backend)
    for _ in range(2):
        step = BisectStep.objects.get(state="dispatched")
        job = builders.job(backend, name="test-1", conclusion="cancelled", dispatch_=step.dispatch)
        with django_capture_on_commit_callbacks(execute=True):
            bisect.step_after_completion(job_id=job.pk)
    assert Break.objects.get().bisection == "inconclusive"
    assert list(BisectStep.objects.values_list("state", flat=True)) == ["inconclusive", "inconclusive"]


@pytest.mark.django_db
def test_a_step_whose_run_never_reports_ends_inconclusive_on_the_schedule(settings, broken):
    settings.BISECT_STEP_HOURS = 12
    backend = broken.tests.get().backend
    bisect.bisect_request(break_id=broken.pk, backend=backend)
    first = BisectStep.objects.get()
    assert bisect.bisections_advance() == {"waiting": 1}  # its run may still come

    BisectStep.objects.filter(pk=first.pk).update(created_at=timezone.now() - timedelta(hours=13))  # it never did
    assert bisect.bisections_advance() == {"dispatched": 1}  # the next candidate instead

    first.refresh_from_db()
    assert first.state == "inconclusive" and first.note == "no result within 12 h"
    assert BisectStep.objects.filter(state="dispatched").exclude(sha=first.sha).count() == 1
    assert Schedule.objects.filter(func="relay.tasks.bisections_advance").exists()


@pytest.mark.django_db
def test_anonymous_users_and_users_without_the_permission_are_refused(client, broken):
    url = f"/api/oot/acme/npu/breaks/{broken.pk}/bisect/"
    response = client.post(url)
    assert response.status_code == 403 and "Sign in" in response.json()["detail"]
    client.force_login(User.objects.create_user("bob"))
    response = client.post(url)
    assert response.status_code == 403 and "change_dispatch" in response.json()["detail"]
    assert not Dispatch.objects.exists()


@pytest.mark.django_db
def test_a_backend_that_did_not_opt_in_is_refused_with_409(client, broken):
    BreakTest.objects.get().backend.__class__.objects.update(bisect=False)
    client.force_login(maintainer())
    response = client.post(f"/api/oot/acme/npu/breaks/{broken.pk}/bisect/")
    assert response.status_code == 409 and "opted in" in response.json()["detail"]
    response = client.post("/api/oot/acme/npu/breaks/999999/bisect/")
    assert response.status_code == 404 and response.json()["detail"]
