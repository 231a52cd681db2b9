"""What a verdict does on GitHub: an L4 check run waits for a failed job's verdict rather than concluding failure,
concludes neutral for an infra failure, and the relay re-runs that failure once by itself — not during an outage.

Callbacks go over real HTTP to the live server; the tasks run inline once the callback commits (Q_SYNC) and talk to
the fake GitHub (check runs, the job API, job logs, rerun-failed-jobs)."""

import pytest

from ootci.models import Exoneration, JobResult
from relay.reports import verdicts
from tests.relay.conftest import completed_failure

CHECK_RUNS = "/repos/pytorch/pytorch/check-runs"
RUN_ID = "24033272679"
DISK_FULL = (
    b"2026-03-01T10:00:00.0000000Z ##[group]Run actions/checkout@v4\n"
    b"2026-03-01T10:00:01.0000000Z ##[endgroup]\n"
    b"2026-03-01T10:00:02.0000000Z ##[group]Run python test/run_test.py\n"
    b"2026-03-01T10:00:02.5000000Z ##[endgroup]\n"
    b"2026-03-01T10:00:03.0000000Z OSError: [Errno 28] No space left on device: '/tmp/torch_extensions'\n"
    b"2026-03-01T10:00:05.0000000Z ##[error]Process completed with exit code 1.\n"
)


@pytest.fixture
def l4(downstream, settings):
    settings.UPSTREAM_REPO = "pytorch/pytorch"
    settings.VERDICT_WAIT_SECONDS = 120
    return downstream("L4", device="npu")


def reruns(fake_github):
    return fake_github.requests_to("POST", rf"/repos/.*/actions/runs/{RUN_ID}/rerun-failed-jobs")


def test_an_infra_failure_waits_for_its_log_then_is_neutral_and_re_run_once(l4, failing_run, fake_github):
    failing_run(l4.repo, log=DISK_FULL)

    assert completed_failure(l4).status_code == 200

    job = JobResult.objects.get()
    assert (job.failure_class, job.verdict) == ("infra", "infra")
    bodies = [r.json for r in fake_github.requests_to("POST", CHECK_RUNS)]
    bodies += [r.json for r in fake_github.requests_to("PATCH", rf"{CHECK_RUNS}/\d+")]
    assert all(b.get("conclusion") != "failure" for b in bodies)  # never failure first, corrected later
    assert "Completed: verdict awaited" in [b["output"]["title"] for b in bodies]
    assert bodies[-1]["conclusion"] == "neutral" and "Verdict: infra" in bodies[-1]["output"]["summary"]
    assert Exoneration.objects.get(job=job).verdict == "infra"
    assert len(reruns(fake_github)) == 1
    assert (job.auto_retry_note, job.auto_retry_at is not None) == ("re-run automatically", True)
    assert verdicts.job_infra_retry(job_id=job.pk) == "done"  # once per attempt, however often it is asked
    assert len(reruns(fake_github)) == 1


def test_no_automatic_re_run_when_many_jobs_of_the_event_failed(l4, failing_run, fake_github, settings):
    settings.AUTO_RETRY_OUTAGE_JOBS = 1  # two failed jobs of one event: an outage
    failing_run(l4.repo, log=DISK_FULL)
    dispatch = l4.dispatch()
    fields = {"url": f"https://github.com/{l4.repo}/actions/runs/{RUN_ID}", "run_id": RUN_ID, "run_attempt": 1}
    other = {"run_id": "99", "job_name": "other", "url": f"https://github.com/{l4.repo}/actions/runs/99"}
    l4.post(l4.body("pull_request.completed.failure", dispatch, **other))

    l4.post(l4.body("pull_request.completed.failure", dispatch, job_name="test-npu", **fields))

    job = JobResult.objects.get(run_id=RUN_ID)
    assert job.delivery_id == JobResult.objects.get(run_id="99").delivery_id  # the same upstream event
    assert job.verdict == "infra" and not reruns(fake_github)
    assert job.auto_retry_note == "not re-run: 2 jobs of this event failed (an outage?)"


def test_a_test_failure_is_never_re_run_automatically(l4, failing_run, fake_github):
    failing_run(l4.repo)  # a linker error: build, not infra

    completed_failure(l4)

    job = JobResult.objects.get()
    assert job.verdict == "unknown" and not reruns(fake_github) and not job.auto_retry_note
