"""Upstream check runs for L3/L4 backends: created on a job's first report, brought to completion, backfilled
when a ciflow/oot/<device> label arrives, retried when GitHub fails, never duplicated.

Callbacks go over real HTTP to the live server; the check-run tasks run inline once the callback commits
(Q_SYNC) and talk to the fake GitHub through PyGithub. Assertions read the fake's request log.
"""

import itertools
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from django_q.models import Schedule

from ootci.models import JobResult, PullRequest
from relay import tasks
from relay.github import check_runs
from relay.reliability import sweeper
from tests.fakes.github import Reply
from tests.fakes.oidc import HEAD
from tests.relay.conftest import fixture_json, run_due_retries

UPSTREAM = "pytorch/pytorch"  # the repo of Downstream.dispatch()'s PR, #4242 at HEAD
CHECK_RUNS = f"/repos/{UPSTREAM}/check-runs"
NAME = "oot/npu/npu-ci/test-npu-float32"
RUN_ID = "24033272679"
RUN_URL = f"https://github.com/ascend/pytorch-npu/actions/runs/{RUN_ID}"


def creates(fake):
    return fake.requests_to("POST", CHECK_RUNS)


def updates(fake, check_run_id=r"\d+"):
    return fake.requests_to("PATCH", f"{CHECK_RUNS}/{check_run_id}")


@pytest.fixture
def label(post_webhook, settings):
    """Post a labeled/unlabeled webhook for PR #4242, each one newer than the last (and than the stored PR)."""
    settings.UPSTREAM_REPO = UPSTREAM
    later = itertools.count(1)

    def post(action: str, name: str, labels: list[str]):
        payload = fixture_json(f"pull_request.{action}.payload")
        payload["repository"]["full_name"] = UPSTREAM
        payload["number"] = 4242
        payload["label"] = {"name": name}
        pr = payload["pull_request"]
        pr.update(number=4242, labels=[{"name": n} for n in labels])
        pr["head"]["sha"] = HEAD
        pr["updated_at"] = (timezone.now() + timedelta(minutes=next(later))).strftime("%Y-%m-%dT%H:%M:%SZ")
        response = post_webhook("pull_request", payload)
        assert response.status_code == 200, response.content
        return response

    return post


def test_an_l4_job_gets_one_check_run_from_in_progress_to_completed(fake_github, downstream):
    ci = downstream("L4", device="npu")
    dispatch = ci.dispatch(sent_ago=30)

    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200

    [create] = creates(fake_github)
    assert create.status == 201
    body = create.json
    assert (body["name"], body["head_sha"], body["status"]) == (NAME, HEAD, "in_progress")
    assert body["external_id"] == f"oot:{ci.backend.pk}:{RUN_ID}"
    assert body["details_url"] == RUN_URL
    assert "conclusion" not in body
    assert body["output"]["title"] == "In progress"
    assert f"[run {RUN_ID}]({RUN_URL})" in body["output"]["summary"]
    assert "Workflow queue time: 3" in body["output"]["summary"]
    [check_run] = fake_github.check_runs.values()
    assert JobResult.objects.get().upstream_check_run_id == check_run["id"]
    assert not fake_github.requests_to("GET", f"/repos/{UPSTREAM}")  # no repo fetch before the POST

    JobResult.objects.update(started_at=timezone.now() - timedelta(seconds=125))
    failed_tests = ["test_ops.py::test_add_npu", {"name": "test_ops.py::test_mul_npu", "message": "mismatch"}]
    results = {"passed": 8430, "failed": 2, "skipped": 20, "failed_tests": failed_tests}
    response = ci.post(ci.body("pull_request.completed.failure", dispatch, test_results=results))

    assert response.status_code == 200, response.text
    assert len(creates(fake_github)) == 1
    [update] = updates(fake_github, check_run["id"])
    assert update.status == 200
    patch = update.json
    assert (patch["status"], patch["conclusion"]) == ("completed", "failure")
    assert patch["external_id"] == f"oot:{ci.backend.pk}:{RUN_ID}"
    assert patch["output"]["title"] == "Failure (new)"  # the verdict: its callback names failed tests, no baseline
    summary = patch["output"]["summary"]
    assert RUN_URL in summary and "| 8430 | 2 | 20 |" in summary
    assert "Workflow queue time: 3" in summary and "Execution time: 2 min" in summary
    assert "`test_ops.py::test_add_npu`" in patch["output"]["text"]
    assert "`test_ops.py::test_mul_npu: mismatch`" in patch["output"]["text"]
    assert (check_run["status"], check_run["conclusion"]) == ("completed", "failure")


def test_the_failed_tests_listed_are_capped(fake_github, downstream):
    ci = downstream("L4", device="npu")
    dispatch = ci.dispatch()
    names = [f"test_ops.py::test_case_{i}" for i in range(80)]
    results = {"passed": 1, "failed": 120, "skipped": 0, "failed_tests": names}

    assert ci.post(ci.body("pull_request.completed.failure", dispatch, test_results=results)).status_code == 200

    [create] = creates(fake_github)
    assert (create.json["status"], create.json["conclusion"]) == ("completed", "failure")
    text = create.json["output"]["text"]
    assert text.startswith(f"### Failed tests ({check_runs.CHECK_RUN_TESTS_LISTED} of 120)")
    assert "test_case_49`" in text and "test_case_50`" not in text
    assert "… and 70 more" in text


def test_a_device_less_backend_is_named_after_its_repo(fake_github, downstream):
    ci = downstream("L4", repo="intel/torch-xpu-ops")
    assert ci.post(ci.body("pull_request.in_progress", ci.dispatch())).status_code == 200
    [create] = creates(fake_github)
    assert create.json["name"] == "oot/torch-xpu-ops/npu-ci/test-npu-float32"


@pytest.mark.parametrize("level", ["L2", "L3"])
def test_no_check_run_below_l3_or_for_l3_without_its_label(fake_github, downstream, level):
    ci = downstream(level, device="npu")
    dispatch = ci.dispatch()
    body = ci.body("pull_request.in_progress", dispatch)
    # The reporter echoes the dispatch-time labels; only our stored PullRequest counts, and it has none.
    assert {"name": "ciflow/oot/npu"} in body["payload"]["pull_request"]["labels"]

    assert ci.post(body).status_code == 200
    assert ci.post(ci.body("pull_request.completed.failure", dispatch)).status_code == 200

    assert not fake_github.requests_to("POST", CHECK_RUNS)
    assert not fake_github.requests_to("PATCH", CHECK_RUNS + r"/\d+")
    assert JobResult.objects.get().upstream_check_run_id is None


def test_l3_label_before_the_run_the_callback_creates_the_check_run(fake_github, downstream, label):
    ci = downstream("L3", device="npu")
    dispatch = ci.dispatch()

    label("labeled", "ciflow/oot/npu", ["ciflow/oot/npu"])
    assert PullRequest.objects.get().labels == ["ciflow/oot/npu"]
    assert not creates(fake_github)  # nothing reported yet: nothing to backfill

    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    assert ci.post(ci.body("pull_request.completed.failure", dispatch)).status_code == 200

    [create] = creates(fake_github)
    assert (create.json["name"], create.json["status"]) == (NAME, "in_progress")
    [update] = updates(fake_github)
    assert (update.json["status"], update.json["conclusion"]) == ("completed", "failure")


def test_l3_label_while_running_backfills_in_progress_check_runs_for_every_job(fake_github, downstream, label):
    ci = downstream("L3", device="npu")
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    other = ci.body("pull_request.in_progress", dispatch, job_name="test-npu-bfloat16", check_run_id="98765432101")
    assert ci.post(other).status_code == 200
    assert not creates(fake_github)

    label("labeled", "ciflow/oot/npu", ["ciflow/oot/npu", "bug"])

    made = creates(fake_github)
    assert sorted(r.json["name"] for r in made) == ["oot/npu/npu-ci/test-npu-bfloat16", NAME]
    assert {r.json["status"] for r in made} == {"in_progress"}
    assert all("conclusion" not in r.json for r in made)
    assert JobResult.objects.filter(upstream_check_run_id__isnull=True).count() == 0

    assert ci.post(ci.body("pull_request.completed.failure", dispatch)).status_code == 200

    assert len(creates(fake_github)) == 2
    [update] = updates(fake_github)
    assert (update.json["status"], update.json["conclusion"]) == ("completed", "failure")
    job = JobResult.objects.get(job_name="test-npu-float32")
    assert update.path == f"{CHECK_RUNS}/{job.upstream_check_run_id}"


def test_l3_label_after_the_run_creates_completed_check_runs_from_stored_results(fake_github, downstream, label):
    ci = downstream("L3", device="npu")
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    assert ci.post(ci.body("pull_request.completed.failure", dispatch)).status_code == 200
    dispatched = len(fake_github.dispatches())

    label("labeled", "ciflow/oot/npu", ["ciflow/oot/npu"])

    [create] = creates(fake_github)
    body = create.json
    assert (body["name"], body["status"], body["conclusion"]) == (NAME, "completed", "failure")
    assert body["output"]["title"] == "Failure (unknown)" and "| 8430 | 2 | 20 |" in body["output"]["summary"]
    assert len(fake_github.dispatches()) == dispatched  # nothing is re-run downstream
    assert not fake_github.requests_to("POST", r"/repos/.+/rerun-failed-jobs")


def test_another_devices_label_creates_nothing(fake_github, downstream, label):
    ci = downstream("L3", device="npu")
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200

    label("labeled", "ciflow/oot/xpu", ["ciflow/oot/xpu"])

    assert not creates(fake_github)
    assert ci.post(ci.body("pull_request.completed.failure", dispatch)).status_code == 200
    assert not creates(fake_github)


def test_unlabeled_stops_new_check_runs_and_completes_the_ones_already_there(fake_github, downstream, label):
    ci = downstream("L3", device="npu")
    dispatch = ci.dispatch()
    label("labeled", "ciflow/oot/npu", ["ciflow/oot/npu"])
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    [created] = creates(fake_github)

    label("unlabeled", "ciflow/oot/npu", [])

    assert PullRequest.objects.get().labels == []
    other = ci.body("pull_request.in_progress", dispatch, job_name="test-npu-bfloat16", check_run_id="98765432101")
    assert ci.post(other).status_code == 200
    assert ci.post(ci.body("pull_request.completed.failure", dispatch)).status_code == 200

    assert creates(fake_github) == [created]  # no new check run for the second job
    [update] = updates(fake_github)  # the existing one is not left spinning
    assert (update.json["status"], update.json["conclusion"]) == ("completed", "failure")
    assert JobResult.objects.get(job_name="test-npu-bfloat16").upstream_check_run_id is None


def test_a_closed_pull_request_gets_no_new_check_runs(fake_github, downstream, post_webhook, settings):
    ci = downstream("L4", device="npu")
    dispatch = ci.dispatch()
    settings.UPSTREAM_REPO = UPSTREAM
    closed = fixture_json("pull_request.closed.payload")
    closed["repository"]["full_name"] = UPSTREAM
    closed["number"] = closed["pull_request"]["number"] = 4242
    closed["pull_request"]["head"]["sha"] = HEAD
    closed["pull_request"]["updated_at"] = (timezone.now() + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")

    response = post_webhook("pull_request", closed)

    assert response.status_code == 202  # relayed, so that backends can cancel their runs
    assert [r.path for r in fake_github.dispatches()] == [f"/repos/{ci.repo}/dispatches"]
    assert fake_github.dispatches()[0].json["client_payload"]["payload"]["action"] == "closed"
    assert PullRequest.objects.get(number=4242).state == PullRequest.State.CLOSED
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    assert not creates(fake_github)


def test_a_re_run_attempt_gets_a_check_run_of_its_own_that_supersedes_the_first(fake_github, downstream):
    ci = downstream("L4", device="npu")
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    assert ci.post(ci.body("pull_request.completed.failure", dispatch)).status_code == 200
    [first] = fake_github.check_runs.values()

    again = {"run_attempt": "2", "check_run_id": "98765432199"}
    assert ci.post(ci.body("pull_request.in_progress", dispatch, **again)).status_code == 200
    assert (
        ci.post(ci.body("pull_request.completed.failure", dispatch, conclusion="success", **again)).status_code == 200
    )

    # GitHub keeps a completed check run completed: attempt 2 shows on a new one of the same name.
    first_create, second_create = creates(fake_github)
    assert second_create.json["name"] == first_create.json["name"] == NAME
    assert second_create.json["status"] == "in_progress"
    second = fake_github.check_runs[max(fake_github.check_runs)]
    assert [r.status for r in updates(fake_github)] == [200, 200]
    assert [r.path for r in updates(fake_github)] == [f"{CHECK_RUNS}/{first['id']}", f"{CHECK_RUNS}/{second['id']}"]
    assert (first["conclusion"], second["conclusion"]) == ("failure", "success")
    attempts = dict(JobResult.objects.values_list("run_attempt", "upstream_check_run_id"))
    assert attempts == {1: first["id"], 2: second["id"]}


def test_a_late_sync_of_an_older_attempt_creates_nothing(fake_github, downstream):
    ci = downstream("L4", device="npu")
    dispatch = ci.dispatch()
    fake_github.script("POST", CHECK_RUNS, Reply(422, {"message": "Invalid request."}))  # attempt 1's try fails
    assert ci.post(ci.body("pull_request.completed.failure", dispatch)).status_code == 200
    again = {"run_attempt": "2", "check_run_id": "98765432199"}
    assert ci.post(ci.body("pull_request.in_progress", dispatch, **again)).status_code == 200
    first = JobResult.objects.get(run_attempt=1)

    assert tasks.check_run_sync(first.pk) == "superseded"
    assert [r.json["status"] for r in creates(fake_github) if r.status == 201] == ["in_progress"]


def test_a_sync_run_twice_updates_and_never_creates_a_second_check_run(fake_github, downstream):
    ci = downstream("L4", device="npu")
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.completed.failure", dispatch)).status_code == 200
    job = JobResult.objects.get()

    assert tasks.check_run_sync(job.pk) == "updated"
    assert tasks.check_run_sync(job.pk) == "updated"

    assert len(creates(fake_github)) == 1
    assert [r.status for r in updates(fake_github, job.upstream_check_run_id)] == [200, 200]


def test_concurrent_syncs_of_one_job_create_one_check_run(fake_github, downstream, settings):
    ci = downstream("L4", device="npu")
    dispatch = ci.dispatch()
    fake_github.script("POST", CHECK_RUNS, Reply(500, {"message": "Server Error"}))  # the callback's own try
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    job = JobResult.objects.get()
    fake_github.latency = 0.2  # both workers are inside GitHub's answer at the same time
    results = []

    def worker():
        try:
            results.append(tasks.check_run_sync(job.pk))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # The second sync finds the job claimed: it creates nothing and comes back later (after the claim).
    assert sorted(results) == ["busy", "created"]
    assert [r.status for r in creates(fake_github)] == [500, 201]
    assert len(fake_github.check_runs) == 1
    assert Schedule.objects.filter(func="relay.tasks.check_run_sync", args=f"({job.pk}, 1)").exists()


def test_a_github_5xx_is_retried_later_and_never_fails_the_callback(fake_github, downstream):
    ci = downstream("L4", device="npu")
    dispatch = ci.dispatch()
    fake_github.script("POST", CHECK_RUNS, Reply(500, {"message": "Server Error"}), Reply(502, {"message": "Bad"}))

    response = ci.post(ci.body("pull_request.in_progress", dispatch))

    assert response.status_code == 200 and response.json()["status"] == "in_progress"
    job = JobResult.objects.get()
    assert job.upstream_check_run_id is None
    [retry] = Schedule.objects.filter(func="relay.tasks.check_run_sync")
    assert retry.schedule_type == Schedule.ONCE and retry.next_run > timezone.now() - timedelta(seconds=1)
    for _ in range(2):  # the scheduler of a qcluster: each retry that fails schedules the next one
        time.sleep(0.2)
        run_due_retries("relay.tasks.check_run_sync")

    assert [r.status for r in creates(fake_github)] == [500, 502, 201]
    # Before trying again it looks for a check run the failed try may have created.
    finds = fake_github.requests_to("GET", f"/repos/{UPSTREAM}/commits/{HEAD}/check-runs")
    assert len(finds) == 2 and "check_name=oot%2Fnpu%2Fnpu-ci%2Ftest-npu-float32" in finds[0].query
    [check_run] = fake_github.check_runs.values()
    assert JobResult.objects.get().upstream_check_run_id == check_run["id"]
    assert not Schedule.objects.filter(func="relay.tasks.check_run_sync").exists()


def test_a_retry_adopts_the_check_run_a_failed_try_created(fake_github, downstream):
    ci = downstream("L4", device="npu")
    dispatch = ci.dispatch()
    fake_github.script("POST", CHECK_RUNS, Reply(502, {"message": "Bad Gateway"}))
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    # GitHub wrote it before its gateway failed.
    made = fake_github.check_run_add(UPSTREAM, name=NAME, head_sha=HEAD, status="in_progress")
    fake_github.check_run_add(UPSTREAM, name=NAME, head_sha=HEAD, status="in_progress", app_id=999)  # not ours
    time.sleep(0.1)

    run_due_retries("relay.tasks.check_run_sync")

    assert [r.status for r in creates(fake_github)] == [502]
    [update] = updates(fake_github)
    assert update.path == f"{CHECK_RUNS}/{made['id']}"
    assert JobResult.objects.get().upstream_check_run_id == made["id"]


def test_a_refused_check_run_is_not_retried(fake_github, downstream):
    ci = downstream("L4", device="npu")
    fake_github.script("POST", CHECK_RUNS, Reply(422, {"message": "Invalid request."}))
    assert ci.post(ci.body("pull_request.in_progress", ci.dispatch())).status_code == 200
    assert not Schedule.objects.filter(func="relay.tasks.check_run_sync").exists()
    assert JobResult.objects.get().upstream_check_run_id is None


def test_the_sweeper_completes_a_zombies_check_run_as_timed_out(fake_github, downstream, settings):
    settings.ZOMBIE_TIMEOUT_HOURS = 6
    ci = downstream("L4", device="npu")
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    JobResult.objects.update(started_at=timezone.now() - timedelta(hours=7))

    assert len(sweeper.jobs_sweep().timed_out) == 1

    [update] = updates(fake_github)
    assert (update.json["status"], update.json["conclusion"]) == ("completed", "timed_out")
    assert update.json["output"]["title"] == "Timed out"
    assert "OOT CI timed it out" in update.json["output"]["summary"]

    # The genuine completion arrives late: GitHub keeps the timed_out run, so a new one carries the verdict.
    assert ci.post(ci.body("pull_request.completed.failure", dispatch, conclusion="success")).status_code == 200
    assert [r.status for r in creates(fake_github)] == [201, 201]
    assert creates(fake_github)[1].json["conclusion"] == "success"
    job = JobResult.objects.get()
    assert job.upstream_check_run_id == max(fake_github.check_runs)


def test_the_sweeper_creates_a_timed_out_check_run_when_one_is_wanted(fake_github, downstream, settings):
    settings.ZOMBIE_TIMEOUT_HOURS = 6
    ci = downstream("L4", device="npu")
    fake_github.script("POST", CHECK_RUNS, Reply(422, {"message": "Invalid request."}))  # the in_progress one failed
    assert ci.post(ci.body("pull_request.in_progress", ci.dispatch())).status_code == 200
    JobResult.objects.update(started_at=timezone.now() - timedelta(hours=7))

    sweeper.jobs_sweep()

    assert (creates(fake_github)[-1].status, creates(fake_github)[-1].json["conclusion"]) == (201, "timed_out")
