"""The skip ledger (ootci.ledger): per baseline run and test file, and each run's diff against the previous baseline
run of the same job; recorded when the report is parsed, and the skips_growing alert."""

from datetime import timedelta

import pytest

from ootci import ledger
from ootci.models import AlertRule, DisabledTest, Incident, LedgerFile, LedgerRun
from relay import tasks
from tests.hud import builders
from tests.relay.alerts.test_incidents import rules_installed


@pytest.fixture(autouse=True)
def store(settings, tmp_path):
    settings.TEST_REPORTS_URL = (tmp_path / "reports").as_uri()


def nightly(backend, sha: str, cases: dict, *, days_ago: float, name="test-1"):
    job = builders.job(backend, name=name, finished=builders.ago(days=days_ago), head_sha=sha, event_type="nightly")
    builders.report_with(job, cases)
    return job


BEFORE = {
    "test_ops.TestOps::test_add": "passed",
    "test_ops.TestOps::test_mul": "passed",
    "test_ops.TestOps::test_div": "skipped",
    "test_nn.TestNN::test_conv": "passed",
    "test_nn.TestNN::test_gone": "passed",
}
AFTER = {
    "test_ops.TestOps::test_add": "passed",
    "test_ops.TestOps::test_mul": "skipped",  # started skipping
    "test_ops.TestOps::test_div": "passed",  # stopped skipping
    "test_nn.TestNN::test_conv": "xpass",  # remove from the skip list
    "test_nn.TestNN::test_new": "xfail",  # added
}


def test_it_diffs_a_baseline_run_against_the_previous_one_of_the_same_job(make_backend):
    backend = make_backend("acme/npu")
    first = nightly(backend, "a" * 40, BEFORE, days_ago=2)
    nightly(backend, "c" * 40, {"test_ops.TestOps::test_add": "skipped"}, days_ago=1.5, name="other-job")
    second = nightly(backend, "b" * 40, AFTER, days_ago=1)

    run = ledger.ledger_record(job_id=second.pk)

    assert run.previous_id == first.pk
    assert (run.added, run.removed, run.started_skipping, run.stopped_skipping, run.xpass) == (1, 1, 1, 1, 1)
    assert run.changes == {
        "added": ["test_nn.py::TestNN::test_new"],
        "removed": ["test_nn.py::TestNN::test_gone"],
        "started_skipping": ["test_ops.py::TestOps::test_mul"],
        "stopped_skipping": ["test_ops.py::TestOps::test_div"],
        "xpass": ["test_nn.py::TestNN::test_conv"],
    }
    assert (run.collected, run.passed, run.skipped, run.xfailed, run.xpassed) == (5, 2, 1, 1, 1)
    assert run.day == second.finished_at.date()


def test_it_counts_each_test_file_with_the_disabled_list(make_backend):
    backend = make_backend("acme/npu")
    DisabledTest.objects.create(backend=backend, name="test_ops.py::TestOps::test_div", kind="generic")
    job = nightly(backend, "a" * 40, BEFORE, days_ago=1)

    run = ledger.ledger_record(job_id=job.pk)

    files = {f.file: (f.collected, f.passed, f.failed, f.skipped, f.xfailed, f.disabled) for f in run.files.all()}
    assert files == {"test_nn.py": (2, 2, 0, 0, 0, 0), "test_ops.py": (3, 2, 0, 1, 0, 1)}
    assert (run.previous, run.changes, run.disabled) == (None, {}, 1)


def test_a_run_recorded_late_has_the_next_run_diffed_against_it(make_backend):
    backend = make_backend("acme/npu")
    nightly(backend, "0" * 40, BEFORE, days_ago=3)
    first = nightly(backend, "a" * 40, BEFORE, days_ago=2)
    second = nightly(backend, "b" * 40, AFTER, days_ago=1)
    ledger.ledger_record(job_id=second.pk)  # the later report was parsed first

    ledger.ledger_record(job_id=first.pk)

    assert LedgerRun.objects.get(job=second).previous_id == first.pk


def test_recording_again_replaces_the_runs_rows(make_backend):
    job = nightly(make_backend("acme/npu"), "a" * 40, BEFORE, days_ago=1)

    ledger.ledger_record(job_id=job.pk)
    ledger.ledger_record(job_id=job.pk)

    assert LedgerRun.objects.count() == 1 and LedgerFile.objects.count() == 2


def test_a_pull_request_job_is_no_baseline_run(make_backend):
    job = builders.job(make_backend("acme/npu"), name="test-1", event_type="pull_request")
    builders.report_with(job, BEFORE)

    assert ledger.ledger_record(job_id=job.pk) is None
    assert not LedgerRun.objects.exists()


def test_the_parse_of_a_baseline_runs_report_records_its_ledger(make_backend, django_capture_on_commit_callbacks):
    job = builders.job(make_backend("acme/npu"), name="test-1", event_type="push")

    with django_capture_on_commit_callbacks(execute=True):
        builders.report_with(job, BEFORE)

    assert LedgerRun.objects.get().job == job


def skipping(n: int, *, skipped: bool) -> dict:
    return {f"test_ops.TestOps::test_{i}": "skipped" if skipped and i < n else "passed" for i in range(100)}


def test_more_than_the_threshold_starting_to_skip_in_a_day_opens_an_incident(make_backend, settings):
    rules_installed()  # a transactional test's flush before this one removes the migration's rules
    settings.SKIP_ALERT_TESTS = 50
    backend = make_backend("acme/npu")
    nightly(backend, "a" * 40, skipping(0, skipped=False), days_ago=2)
    calm = nightly(backend, "b" * 40, skipping(50, skipped=True), days_ago=1.9)
    assert tasks.ledger_record(calm.pk) == "nothing"  # 50 is not more than 50
    nightly(backend, "c" * 40, skipping(0, skipped=False), days_ago=1.5)
    worse = nightly(backend, "d" * 40, skipping(51, skipped=True), days_ago=0.01)

    assert tasks.ledger_record(worse.pk) == "opened"

    incident = Incident.objects.get(rule__kind=AlertRule.Kind.SKIPS)
    assert incident.what.startswith("acme/npu: 51 tests started skipping on ")
    assert incident.details["threshold"] == 50


def test_a_rules_own_threshold_wins_and_a_calm_later_day_resolves(make_backend, settings):
    backend = make_backend("acme/npu")
    AlertRule.objects.create(kind=AlertRule.Kind.SKIPS, backend=backend, threshold=5, resolve_after=1)
    nightly(backend, "a" * 40, skipping(0, skipped=False), days_ago=3)
    bad = nightly(backend, "b" * 40, skipping(6, skipped=True), days_ago=2)
    assert tasks.ledger_record(bad.pk) == "opened"
    calm = builders.job(
        backend, name="test-1", head_sha="c" * 40, event_type="nightly", finished=bad.finished_at + timedelta(days=1)
    )
    builders.report_with(calm, skipping(6, skipped=True))

    assert tasks.ledger_record(calm.pk) == "resolved"
