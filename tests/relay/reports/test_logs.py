"""Failed jobs' logs: found on GitHub by job name, fetched through the 302 without our token, kept and classified."""

from datetime import timedelta

from django.db.models import F
from django.utils import timezone

from ootci.models import JobFailure, JobResult
from relay.reports import logs
from tests.relay.conftest import completed_failure


def test_a_failed_job_is_classified_from_its_github_log(downstream, failing_run, fake_github):
    ci = downstream()
    job_id = failing_run(ci.repo)

    response = completed_failure(ci)

    assert response.status_code == 200, response.text
    job = JobResult.objects.get()
    failure = JobFailure.objects.get(job=job)
    assert (failure.rule_name, failure.failure_class, failure.source) == ("linker undefined reference", "build", "rule")
    assert (failure.line_number, failure.line) == (5, "ld: error: undefined symbol: at::native::copy_stub")
    assert (failure.failed_step, failure.failed_step_number, failure.github_job_id) == ("Build and test", 3, job_id)
    assert failure.line_url == f"https://github.com/{ci.repo}/actions/runs/24033272679/job/{job_id}#step:3:3"
    assert (job.failure_class, job.outcome) == ("build", "test")  # no failed tests, yet not infra: it did not build
    storage = fake_github.requests_to("GET", r"/storage/job-logs/\d+")
    assert len(storage) == 1 and "authorization" not in storage[0].headers


# A step the job API counts but the log never shows (skipped), a test step that fails, then an always() step whose
# own error is infra: the cause is the test, and the link names the step as GitHub numbers it (4, not the 3rd header).
SKIPPED_STEP_AND_POST_JOB_NOISE = (
    b"2026-03-01T10:00:00.0000000Z Current runner version: '2.321.0'\n"
    b"2026-03-01T10:00:01.0000000Z ##[group]Run actions/checkout@v4\n"
    b"2026-03-01T10:00:02.0000000Z ##[group]Run python test/run_test.py\n"
    b"2026-03-01T10:00:03.0000000Z ##[endgroup]\n"
    b"2026-03-01T10:00:04.0000000Z FAILED test/test_ops.py::test_add - AssertionError: 1 != 2\n"
    b"2026-03-01T10:00:05.0000000Z ##[error]Process completed with exit code 1.\n"
    b"2026-03-01T10:00:07.0000000Z ##[group]Run actions/upload-artifact@v4\n"
    b"2026-03-01T10:00:08.0000000Z Error: Failed to upload artifacts: Unable to locate credentials\n"
    b"2026-03-01T10:00:09.0000000Z ##[error]Failed to upload artifact: Unable to locate credentials\n"
    b"2026-03-01T10:00:10.0000000Z Post job cleanup.\n"
)
STEPS = [
    {"name": "Set up job", "number": 1, "conclusion": "success"},
    {"name": "Checkout", "number": 2, "conclusion": "success"},
    {"name": "Configure sccache", "number": 3, "conclusion": "skipped"},
    {
        "name": "Run tests",
        "number": 4,
        "conclusion": "failure",
        "started_at": "2026-03-01T10:00:02Z",
        "completed_at": "2026-03-01T10:00:06Z",
    },
    {"name": "Upload test reports", "number": 5, "conclusion": "failure"},
]


def test_the_failed_step_decides_and_its_link_lands_on_the_line(downstream, failing_run):
    ci = downstream()
    job_id = failing_run(ci.repo, steps=STEPS, log=SKIPPED_STEP_AND_POST_JOB_NOISE)

    completed_failure(ci, test_results={"passed": 10, "failed": 1})

    failure = JobFailure.objects.get()
    assert (failure.rule_name, failure.failure_class) == ("pytest failed test", "test")  # not the upload's infra
    assert (failure.failed_step, failure.failed_step_number) == ("Run tests", 4)
    assert failure.line_url.endswith(f"/job/{job_id}#step:4:3")  # the header is the step's line 1


def test_without_the_job_api_the_step_of_the_first_error_decides(downstream, failing_run):
    ci = downstream()
    untimed = [{k: v for k, v in step.items() if k not in ("started_at", "completed_at")} for step in STEPS]
    failing_run(ci.repo, steps=untimed, log=SKIPPED_STEP_AND_POST_JOB_NOISE)

    completed_failure(ci, test_results={"passed": 10, "failed": 1})

    failure = JobFailure.objects.get()
    assert (failure.rule_name, failure.failure_class) == ("pytest failed test", "test")


def test_a_failed_checkout_step_is_infra_whatever_the_log_says(downstream, failing_run):
    ci = downstream()
    failing_run(ci.repo, steps=[{"name": "Run actions/checkout@v4", "number": 2, "conclusion": "failure"}])

    completed_failure(ci)

    job = JobResult.objects.get()
    assert (job.failure.failure_class, job.failure.source, job.outcome) == ("infra", "step", "infra")
    assert job.failure.rule_name == "linker undefined reference"  # the line is still shown


def test_an_unknown_job_name_is_recorded_as_the_reason(downstream, failing_run, fake_github):
    ci = downstream()
    failing_run(ci.repo)

    fake_github.actions_jobs[(ci.repo.lower(), 24033272679, 1)][0]["conclusion"] = "failure"  # two failed: no guess
    completed_failure(ci, job_name="no-such-job", test_results={"passed": 1, "failed": 2})

    failure = JobFailure.objects.get()
    assert "No job named 'no-such-job'" in failure.problem
    assert (failure.failure_class, failure.source) == ("test", "callback")


def test_a_run_github_does_not_know_is_recorded_and_keeps_the_token(downstream, fake_github):
    ci = downstream()  # no failing_run: the jobs of the run are a 404, as for a run of another host's CI

    completed_failure(ci)
    completed_failure(ci, job_name="test-npu-float16")

    failures = list(JobFailure.objects.order_by("pk"))
    assert len(failures) == 2 and all("404" in f.problem for f in failures)
    # A listing's 404 says the run is not there, not that the token is stale: one token for both jobs.
    assert len(fake_github.requests_to("POST", r"/app/installations/\d+/access_tokens")) == 1


def test_a_successful_job_is_not_fetched(downstream, failing_run, fake_github):
    ci = downstream()
    failing_run(ci.repo)

    completed_failure(ci, conclusion="success")

    assert not JobFailure.objects.exists()
    assert fake_github.requests_to("GET", r"/repos/.*/actions/jobs/\d+/logs") == []


def test_classifying_twice_keeps_one_verdict(downstream, failing_run):
    ci = downstream()
    failing_run(ci.repo)
    completed_failure(ci)
    job = JobResult.objects.get()

    logs.job_log_classify(job_id=job.pk)

    assert JobFailure.objects.filter(job=job).count() == 1


def test_logs_past_retention_are_deleted_and_the_verdict_stays(downstream, failing_run, settings, tmp_path):
    ci = downstream()
    failing_run(ci.repo)
    completed_failure(ci)
    failure = JobFailure.objects.get()
    stored = tmp_path / failure.log_key
    assert stored.is_file()
    settings.JOB_LOG_RETENTION_DAYS = 30

    assert logs.job_logs_clean() == 0
    assert logs.job_logs_clean(now=timezone.now() + timedelta(days=31)) == 1

    assert not stored.exists()
    failure.refresh_from_db()
    assert (failure.log_key, failure.rule_name, failure.failure_class) == ("", "linker undefined reference", "build")


def test_the_log_clean_up_leaves_the_test_reports_alone(downstream, failing_run, settings, tmp_path):
    ci = downstream()
    failing_run(ci.repo)
    completed_failure(ci)
    report = tmp_path / "reports" / "some" / "report.xml"
    report.parent.mkdir(parents=True)
    report.write_bytes(b"<testsuite/>")
    settings.JOB_LOG_RETENTION_DAYS = 30

    assert logs.job_logs_clean(now=timezone.now() + timedelta(days=31)) == 1

    assert report.is_file()


def test_the_admin_reclassifies_the_selected_jobs(downstream, failing_run, fake_github, admin_client):
    ci = downstream()
    failing_run(ci.repo)
    completed_failure(ci)
    failure = JobFailure.objects.get()
    JobFailure.objects.filter(pk=failure.pk).update(rule_name="", failure_class="unknown", line="")

    response = admin_client.post(
        "/admin/ootci/jobfailure/", {"action": "reclassify", "_selected_action": [failure.pk]}, follow=True
    )

    assert "1 job(s) queued for classification again." in response.content.decode()
    again = JobFailure.objects.get(job_id=failure.job_id)
    assert (again.rule_name, again.failure_class) == ("linker undefined reference", "build")
    assert len(fake_github.requests_to("GET", r"/storage/job-logs/\d+")) == 2


def test_the_failed_jobs_of_one_run_attempt_share_its_job_listing(downstream, failing_run, fake_github, monkeypatch):
    """Jobs that completed before a listing of their run attempt was taken are found in it: a 50-shard run is not
    listed 50 times (GitHub's rate limit). A job that completes after the listing lists the attempt again."""
    from django_q.brokers import get_broker
    from django_q.conf import Conf

    from relay.reports.follow_up import job_completed_follow_up

    monkeypatch.setattr(Conf, "SYNC", False)  # the follow-ups queued, then run here in order, as a lagging worker
    ci = downstream()
    first = failing_run(ci.repo)
    second = first + 1
    fake_github.actions_jobs[(ci.repo.lower(), 24033272679, 1)].append(
        {"id": second, "name": "test-npu-2", "conclusion": "failure", "steps": []}
    )
    fake_github.job_logs[second] = b"RuntimeError: CUDA error: device-side assert triggered\n"
    listings = r"/repos/.*/actions/runs/24033272679/attempts/1/jobs"

    for name in ("test-npu", "test-npu-2"):
        assert completed_failure(ci, job_name=name).status_code == 200
    get_broker().purge_queue()
    # The worker comes to them later than the clocks' margin (artifacts.LISTING_MARGIN) after they completed.
    JobResult.objects.update(completed_at=F("completed_at") - timedelta(seconds=3))
    for job in JobResult.objects.order_by("pk"):
        job_completed_follow_up(job_id=job.pk)

    assert len(fake_github.requests_to("GET", listings)) == 1
    found = {f.job.job_name: f.github_job_id for f in JobFailure.objects.select_related("job")}
    assert found == {"test-npu": first, "test-npu-2": second}

    fake_github.actions_jobs[(ci.repo.lower(), 24033272679, 1)].append(
        {"id": second + 1, "name": "test-npu-3", "conclusion": "failure", "steps": []}
    )
    fake_github.job_logs[second + 1] = b"Killed\n"
    completed_failure(ci, job_name="test-npu-3")  # after the listing: the attempt is listed anew
    job_completed_follow_up(job_id=JobResult.objects.get(job_name="test-npu-3").pk)
    assert len(fake_github.requests_to("GET", listings)) == 2
    assert JobFailure.objects.get(job__job_name="test-npu-3").github_job_id == second + 1
