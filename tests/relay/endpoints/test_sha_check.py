"""Self-reported upstream SHAs are checked (issue 26): a nightly/periodic report's SHA must be a commit of the upstream
repository, as GitHub (the fake, over real HTTP) answers the App: 200 known, 422 or 404 unknown, unreachable → accepted
unverified and re-checked by the schedule."""

import secrets

import pytest
from django.core.cache import cache
from django_q.models import Schedule

from ootci.models import CallbackRejection, JobResult
from relay import tasks
from relay.endpoints import sha_check
from tests.fakes.github import Reply
from tests.fakes.oidc import reporter_body
from tests.schedules import schedules_installed

UPSTREAM = "pytorch/pytorch"


@pytest.fixture
def github(fake_github, settings):
    settings.UPSTREAM_REPO = UPSTREAM
    cache.delete(sha_check._key("down"))  # a port of an earlier test's fake may come back
    return fake_github


def new_sha() -> str:
    return secrets.token_hex(20)  # the cache remembers answers an hour: every test its own commits


def nightly(sha: str, **workflow) -> dict:
    return reporter_body("nightly.completed", delivery_id=sha, **workflow)


def commit_requests(github, sha: str) -> list:
    return github.requests_to("GET", rf"/repos/{UPSTREAM}/commits/{sha}$")


def test_a_report_of_a_known_commit_is_verified_and_the_answer_is_cached(downstream, github):
    sha = new_sha()
    github.commits[UPSTREAM] = {sha}
    ci = downstream()

    response = ci.post(nightly(sha))

    assert response.status_code == 200, response.text
    assert JobResult.objects.get().sha_check == JobResult.ShaCheck.VERIFIED
    assert ci.post(nightly(sha, job_name="another-job")).status_code == 200
    assert len(commit_requests(github, sha)) == 1  # the second report of that SHA asked nobody
    assert commit_requests(github, sha)[0].headers["accept"] == "application/vnd.github.sha"


def test_a_sha_github_answers_422_for_is_refused_with_422(downstream, github):
    ci = downstream()
    sha = new_sha()

    response = ci.post(nightly(sha))

    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(f"{sha} is not a commit of {UPSTREAM}")
    assert not JobResult.objects.exists()
    assert CallbackRejection.objects.get().status_code == 422  # counted on the relay strip like any refusal
    assert len(commit_requests(github, sha)) == 1


def test_a_sha_github_answers_404_for_is_refused_too(downstream, github):
    ci = downstream()
    sha = new_sha()
    github.script("GET", f"/repos/{UPSTREAM}/commits/{sha}", Reply(404, {"message": "Not Found"}))
    body = nightly(sha)
    body["event_type"] = "periodic"

    response = ci.post(body)

    assert response.status_code == 422
    assert "a periodic report's delivery_id is the upstream commit it tested" in response.json()["detail"]
    assert not JobResult.objects.exists()


@pytest.mark.parametrize("trouble", ["a 502", "no answer"])
def test_with_github_unreachable_a_report_is_accepted_unverified_and_the_schedule_checks_it(
    downstream, github, settings, trouble, client
):
    ci = downstream()
    sha, bogus = new_sha(), new_sha()
    url = github.url
    if trouble == "a 502":
        github.outage = Reply(502, {"message": "Server Error"})
    else:
        settings.GITHUB_API_URL = "http://127.0.0.1:9"  # nothing listens there

    assert ci.post(nightly(sha)).status_code == 200
    assert ci.post(nightly(bogus)).status_code == 200  # GitHub left alone meanwhile: no second timeout
    assert set(JobResult.objects.values_list("sha_check", flat=True)) == {JobResult.ShaCheck.UNVERIFIED}
    assert tasks.sha_checks_retry() == {"verified": 0, "unknown": 0, "left": 2}  # still down: nothing changes
    job = JobResult.objects.get(head_sha=sha)
    page = client.get(f"/oot/{ci.repo}/jobs/{job.pk}/")
    assert "not yet checked: GitHub was unreachable" in page.content.decode()

    github.outage = None
    settings.GITHUB_API_URL = url
    github.commits[UPSTREAM] = {sha}
    assert tasks.sha_checks_retry() == {"verified": 1, "unknown": 1, "left": 0}

    assert JobResult.objects.get(head_sha=sha).sha_check == JobResult.ShaCheck.VERIFIED
    marked = JobResult.objects.get(head_sha=bogus)
    assert marked.sha_check == JobResult.ShaCheck.UNKNOWN  # kept and marked, never deleted
    page = client.get(f"/oot/{ci.repo}/jobs/{marked.pk}/")
    assert f"not a commit of {UPSTREAM}" in page.content.decode()
    assert tasks.sha_checks_retry() == {"verified": 0, "unknown": 0, "left": 0}


def test_a_pull_request_report_is_not_asked_about(downstream, github):
    ci = downstream()
    dispatch = ci.dispatch()

    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200

    assert JobResult.objects.get().sha_check == ""
    assert not github.requests_to("GET", r"/repos/.*/commits/[^/]+$")


@pytest.mark.django_db
def test_the_recheck_is_scheduled():
    schedules_installed()
    schedule = Schedule.objects.get(func="relay.tasks.sha_checks_retry")
    assert (schedule.name, schedule.schedule_type, schedule.minutes) == ("relay: re-check unverified SHAs", "I", 10)
