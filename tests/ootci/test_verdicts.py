"""One verdict per failure (ootci.verdicts) and what it decides (ootci.baseline): the order of the test verdicts, a
job as guilty as its worst failure, the one flaky definition, the exoneration rules, and each verdict read from
hand-built histories with parsed reports, as the check runs, the PR comment and the pages read it."""

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.utils import timezone

from ootci import baseline, verdicts
from ootci.models import Backend, DisabledTest, Exoneration, JobFailure, JobResult
from tests.hud import builders
from tests.hud.failing_history import BASE, HEAD, History, generic_id, pushed

INLINES = ("level_changes", "buildkite_pipelines", "identity_changes")  # the backend page's inline formsets

# --- the rules --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        ({"infra": True, "disabled": True, "flaky": True, "baseline": "failing"}, "infra"),
        ({"infra": False, "disabled": True, "flaky": True, "baseline": "failing"}, "disabled"),
        ({"infra": False, "disabled": False, "flaky": True, "baseline": "failing"}, "flaky"),
        ({"infra": False, "disabled": False, "flaky": False, "baseline": "failing"}, "broken-baseline"),
        ({"infra": False, "disabled": False, "flaky": False, "baseline": "passed"}, "new"),
        ({"infra": False, "disabled": False, "flaky": False, "baseline": "absent"}, "new"),
        ({"infra": False, "disabled": False, "flaky": False, "baseline": ""}, "new"),
    ],
)
def test_a_failing_test_gets_the_first_verdict_that_holds(facts, expected):
    assert verdicts.failing_test_verdict(**facts) == expected


def test_a_job_is_only_as_innocent_as_its_worst_failure():
    assert verdicts.job_verdict(["infra", "flaky", "new", "broken-baseline"], infra=False) == "new"
    assert verdicts.job_verdict(["flaky", "broken-baseline"], infra=False) == "broken-baseline"
    assert verdicts.job_verdict(["infra", "disabled"], infra=True) == "disabled"
    assert verdicts.job_verdict([], infra=False) == "unknown"  # no per-test data
    assert verdicts.job_verdict([], infra=True) == "infra"


def test_flaky_names_its_evidence_and_never_sits_beside_zero_flakiness():
    rerun = verdicts.flaky_evidence([{"status": "passed", "reruns": 2}], [], sha="a")
    assert rerun.evidence == ("passed on rerun",) and rerun.flakiness > 0
    # Failed at this SHA in one job and passed in another, while every earlier result failed.
    history = [{"status": "failed", "job_sha": f"{n}", "reruns": 0} for n in range(10)]
    here = [{"status": "failed", "reruns": 0}, {"status": "passed", "reruns": 0}]
    same_sha = verdicts.flaky_evidence(here, history, sha="a")
    assert same_sha.evidence[0] == "passed and failed at one SHA" and same_sha.flakiness > 0
    # Flips on its history alone: read f, f, p, f, p, f, p: 5 flips over 7 results, over the threshold.
    flips = [{"status": s, "job_sha": f"{n}", "reruns": 0} for n, s in enumerate(["failed", "passed"] * 3)]
    alternating = verdicts.flaky_evidence([{"status": "failed", "reruns": 0}], flips, sha="x")
    assert alternating.flaky and alternating.evidence[0] == "flakiness 83 % over its last 7 results"
    steady = verdicts.flaky_evidence([{"status": "failed", "reruns": 0}], history, sha="x")
    assert not steady.flaky and steady.flakiness == 0.0


def test_exoneration_is_refused_for_new_failures_crashes_mass_failures_and_stale_baselines():
    ok = {"failing": 2, "counted": 100, "failure_class": "test", "failure_line": "", "baseline_age_days": 1.0}
    assert verdicts.exoneration_refused("broken-baseline", **ok, broken_baseline=True) == ""
    assert verdicts.exoneration_refused("new", **ok, broken_baseline=False) == "its verdict is new"
    assert verdicts.exoneration_refused("unknown", **ok, broken_baseline=False) == "its verdict is unknown"
    crash = ok | {"failure_line": "Fatal Python error: Segmentation fault"}
    assert verdicts.exoneration_refused("flaky", **crash, broken_baseline=False) == "the tested process crashed"
    runner = ok | {"failure_class": "infra", "failure_line": "The runner has received a shutdown signal (SIGTERM)"}
    assert verdicts.exoneration_refused("infra", **runner, broken_baseline=False) == ""
    mass = ok | {"failing": 81}
    assert "81 of its 100 tests failed" in verdicts.exoneration_refused("flaky", **mass, broken_baseline=False)
    stale = ok | {"baseline_age_days": 8.0}
    assert "older than 7 days" in verdicts.exoneration_refused("broken-baseline", **stale, broken_baseline=True)


def test_a_disabled_list_names_a_test_by_generic_id_or_pytorch_name():
    entries = [("a.py::TestA::test_x", "generic", "", ""), ("test_y (__main__.TestB)", "pytorch", "test_y", "TestB")]
    ids = ["a.py::TestA::test_x", "b.py::TestB::test_y", "b.py::TestB::test_z"]
    assert verdicts.job_disabled_tests(ids, entries) == {"a.py::TestA::test_x", "b.py::TestB::test_y"}


# --- on the system of record ------------------------------------------------------------------------------------------


@pytest.fixture
def history(settings, tmp_path, django_capture_on_commit_callbacks) -> History:
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    return History(django_capture_on_commit_callbacks)


@pytest.fixture
def l4(make_backend):
    return make_backend(repo="acme/npu", level="L4", device="npu")


def pr_with(history, backend, statuses, *, base=None, number=7):
    """A PR at its own head pushed 2 hours ago on BASE, whose nightly run had ``base``; its job failing ``statuses``."""
    head = f"{number:040x}" if number != 7 else HEAD
    pr = builders.pull_request(number, head)
    pushed(pr, hours=2, sha=head)
    if base is not None:
        history.baseline(backend, base, sha=BASE, hours=10)
    return history.pr_job(backend, pr, statuses, sha=head)


@pytest.mark.django_db
def test_each_failing_test_of_a_pr_job_gets_its_verdict_from_the_one_baseline_rule(history, l4):
    base = {"t_old": "failed", "t_new": "passed", "t_off": "failed", "t_ok": "passed"}
    job = pr_with(history, l4, {"t_old": "failed", "t_new": "failed", "t_off": "error", "t_ok": "passed"}, base=base)
    DisabledTest.objects.create(backend=l4, name=generic_id("t_off"), kind="generic")

    found = baseline.jobs_verdicts([job])[job.pk]

    assert {t.test_id.rsplit("::")[-1]: t.verdict for t in found.tests} == {
        "t_old": "broken-baseline",
        "t_new": "new",
        "t_off": "disabled",
    }
    assert found.verdict == "new" and (found.baseline_rule, found.baseline_sha) == ("base", BASE)
    assert (found.failing, found.counted) == (3, 4)


@pytest.mark.django_db
def test_an_l4_check_run_is_neutral_when_every_failure_was_already_failing(history, l4):
    job = pr_with(history, l4, {"t_old": "failed", "t_ok": "passed"}, base={"t_old": "failed", "t_ok": "passed"})

    decision = baseline.check_run_decision(job, conclusion="failure")

    assert (decision.conclusion, decision.found.verdict) == ("neutral", "broken-baseline")
    record = Exoneration.objects.get(job=job)
    assert record.backend == l4 and record.tests[0]["verdict"] == "broken-baseline"
    assert record.evidence["baseline"]["sha"] == BASE
    text = baseline.verdict_text(decision)
    assert "Exonerated" in text and "does not block" in text and generic_id("t_old") in text
    assert JobResult.objects.get(pk=job.pk).verdict == "broken-baseline"


@pytest.mark.django_db
def test_a_new_failure_an_old_baseline_or_exoneration_off_keep_the_failure(history, l4):
    job = pr_with(history, l4, {"t_new": "failed", "t_ok": "passed"}, base={"t_new": "passed", "t_ok": "passed"})
    decision = baseline.check_run_decision(job, conclusion="failure")
    assert (decision.conclusion, decision.refused) == ("failure", "its verdict is new")

    base = {"t_old": "failed", "t_ok": "passed"}
    old = pr_with(history, l4, {"t_old": "failed", "t_ok": "passed"}, base=base, number=8)
    later = timezone.now() + timedelta(days=8)
    assert baseline.check_run_decision(old, conclusion="failure", now=later).conclusion == "failure"
    l4.exonerate = False
    l4.save()
    old.refresh_from_db()
    assert baseline.check_run_decision(old, conclusion="failure").conclusion == "failure"
    assert not Exoneration.objects.exists()


@pytest.mark.django_db
def test_a_cancelled_job_never_blocks_and_an_l3_backend_does_not_exonerate_by_default(history, l4, make_backend):
    cancelled = builders.job(l4, name="ut", conclusion="cancelled", event_type="pull_request", pr_number=7)
    assert baseline.check_run_decision(cancelled, conclusion="cancelled").conclusion == "neutral"
    l3 = make_backend(repo="acme/xpu", level="L3", device="xpu")
    assert not l3.exonerates and l4.exonerates


@pytest.mark.django_db
def test_a_failed_job_waits_for_its_verdict_then_concludes_on_what_is_known(l4, settings):
    settings.VERDICT_WAIT_SECONDS = 120
    job = builders.job(l4, name="ut", conclusion="failure", event_type="pull_request", pr_number=7)
    JobResult.objects.filter(pk=job.pk).update(completed_at=timezone.now())
    job.refresh_from_db()

    waiting = baseline.check_run_decision(job, conclusion="failure")
    assert waiting.conclusion == "" and waiting.wait_until > timezone.now()
    assert "awaited" in baseline.verdict_text(waiting)

    late = baseline.check_run_decision(job, conclusion="failure", now=timezone.now() + timedelta(seconds=121))
    assert (late.conclusion, late.found.verdict) == ("failure", "unknown")  # no per-test data: never exonerated

    JobFailure.objects.create(job=job, failure_class="infra", line="No space left on device")
    JobResult.objects.filter(pk=job.pk).update(failure_class="infra")
    job.refresh_from_db()
    infra = baseline.check_run_decision(job, conclusion="failure")
    assert (infra.conclusion, infra.found.verdict) == ("neutral", "infra")
    assert baseline.infra_retry_due(job, infra.found)  # an L4 PR job of a GitHub Actions run: re-run once
    JobResult.objects.filter(pk=job.pk).update(auto_retry_note="re-run automatically")
    job.refresh_from_db()
    assert not baseline.infra_retry_due(job, infra.found)


@pytest.mark.django_db
def test_turning_exoneration_off_is_audited(admin_client, make_backend):
    backend = make_backend(repo="acme/gpu", level="L4", device="gpu")
    form = {"repo": backend.repo, "level": "L4", "device": "gpu", "oncalls": "", "events": ["pull_request"]}
    form |= {"enabled": "on", "exonerate": "false", "notes": "", "reason": ""}
    form |= {f"{inline}-{count}": "0" for inline in INLINES for count in ("TOTAL_FORMS", "INITIAL_FORMS")}

    response = admin_client.post(f"/admin/ootci/backend/{backend.pk}/change/", form)

    assert response.status_code == 302, response.content.decode()[:2000]
    assert Backend.objects.get(pk=backend.pk).exonerate is False and not Backend.objects.get(pk=backend.pk).exonerates
    assert "Exonerate" in LogEntry.objects.get(object_id=str(backend.pk)).get_change_message()
