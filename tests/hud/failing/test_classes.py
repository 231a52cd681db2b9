"""Failing tests classified on hand-built histories: new, already failing, only here, flaky (rerun within one job;
attempts that disagree), the flakiness score, since when, and each baseline rule (base commit, before the push,
the previous run, none) — read through hud.figures.queries, as the pages and API do."""

from datetime import timedelta

import pytest

from hud.failing import classes
from hud.failing import queries as failing_queries
from hud.stores import allowlisted
from tests.hud import builders
from tests.hud.failing_history import BASE, HEAD, History, generic_id, pushed

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(settings, tmp_path, django_capture_on_commit_callbacks) -> History:
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    settings.HUD_CACHE_SECONDS = 0
    return History(django_capture_on_commit_callbacks)


@pytest.fixture
def npu(make_backend):
    return make_backend(repo="acme/npu", level="L2", device="npu")


@pytest.fixture
def xpu(make_backend):
    return make_backend(repo="intel/xpu", level="L2", device="xpu")


def build_pr(history: History, npu, xpu):
    """PR 7: head HEAD on base BASE. npu ran BASE nightly; xpu has no baseline."""
    pr = builders.pull_request(7, HEAD)
    pushed(pr, hours=2)
    history.baseline(
        npu,
        {"t_new": "passed", "t_old": "failed", "t_only": "passed", "t_rerun": "passed", "t_att": "passed"},
        sha=BASE,
        hours=10,
    )
    history.pr_job(
        npu,
        pr,
        {
            "t_new": "failed",
            "t_old": "error",
            "t_only": "failed",
            "t_rerun": "failed",
            "t_absent": "failed",
            "t_ok": "passed",
        },
        name="test-1",
    )
    history.pr_job(npu, pr, {"t_rerun": "flaky"}, name="test-2")
    history.pr_job(npu, pr, {"t_att": "passed"}, name="test-3", hours=1.5)
    history.pr_job(npu, pr, {"t_att": "failed"}, name="test-3", hours=1, run_attempt=2)
    history.pr_job(xpu, pr, {"t_only": "passed", "t_new": "failed"}, name="test-1")
    return pr


def by_name(found) -> dict:
    return {t.test_id.rsplit("::", 1)[1]: t for t in found.tests}


def test_each_failing_test_on_a_pr_gets_its_classes(history, npu, xpu):
    build_pr(history, npu, xpu)
    info = allowlisted.backend("acme/npu")

    found = failing_queries.failing_tests(info, pr=7)

    tests = by_name(found)
    assert set(tests) == {"t_new", "t_old", "t_only", "t_rerun", "t_att", "t_absent"}  # not t_ok, which passed
    assert {name: t.verdict for name, t in tests.items()} == {
        "t_new": "new",
        "t_old": "broken-baseline",
        "t_only": "new",
        "t_rerun": "flaky",  # flaky before broken-baseline or new: it passed at this SHA
        "t_att": "flaky",
        "t_absent": "new",  # a baseline that did not run it cannot clear it
    }
    assert tests["t_new"].classes == ("passed on baseline",)
    assert tests["t_old"].classes == ("failing on baseline",)
    assert tests["t_only"].classes == ("passed on baseline", "only here")
    assert tests["t_rerun"].classes == ("passed on baseline", "flaky")
    assert tests["t_absent"].classes == ("not on baseline",)
    assert tests["t_new"].elsewhere == "fails" and tests["t_absent"].elsewhere == "not run"
    assert found.baseline.rule == "base" and found.baseline.sha == BASE and found.baseline.event == "nightly"
    assert (found.new, found.already_failing, found.only_here, found.flaky, found.total) == (3, 1, 1, 2, 6)
    assert found.summary == "3 new failures on npu, 2 flaky, 1 broken-baseline"
    assert found.verdict == "new"


def test_flaky_says_why_rerun_within_a_job_or_attempts_that_disagree(history, npu, xpu):
    build_pr(history, npu, xpu)

    tests = by_name(failing_queries.failing_tests(allowlisted.backend("acme/npu"), pr=7))

    assert tests["t_rerun"].flaky_why == ("passed on rerun", "passed and failed at one SHA")
    assert tests["t_att"].flaky_why == ("passed and failed at one SHA",)  # attempt 1 passed, attempt 2 failed
    assert tests["t_att"].jobs == ("ci / test-3",)
    assert not tests["t_new"].flaky and not tests["t_old"].flaky


def test_a_backend_without_a_nightly_or_push_run_has_no_baseline(history, npu, xpu):
    build_pr(history, npu, xpu)

    found = failing_queries.failing_tests(allowlisted.backend("intel/xpu"), pr=7)

    assert found.baseline is None
    only = [(generic_id("t_new"), "new", ("no baseline",), "fails")]
    assert [(t.test_id, t.verdict, t.classes, t.elsewhere) for t in found.tests] == only
    assert found.summary == "1 new failure on xpu (no baseline)"


def test_the_pr_summary_line_counts_new_failures_apart(history, npu, xpu):
    build_pr(history, npu, xpu)

    line = classes.summary_line(failing_queries.pr_failing_tests(7))

    npu_part, xpu_part = line.split(" · ")
    assert npu_part == "3 new failures on npu, 2 flaky, 1 broken-baseline"
    assert xpu_part == "1 new failure on xpu (no baseline)"


def test_without_a_run_on_the_base_commit_the_latest_run_before_the_push_is_the_baseline(history, npu):
    pr = builders.pull_request(8, HEAD)
    pushed(pr, hours=3)
    history.baseline(npu, {"t_a": "failed"}, sha="c" * 40, hours=20)
    history.baseline(npu, {"t_a": "passed"}, sha="d" * 40, hours=5)  # the latest before the push
    history.baseline(npu, {"t_a": "failed"}, sha="e" * 40, hours=2)  # after the push: not a baseline
    history.pr_job(npu, pr, {"t_a": "failed"})

    found = failing_queries.failing_tests(allowlisted.backend("acme/npu"), pr=8)

    assert (found.baseline.rule, found.baseline.sha) == ("before", "d" * 40)
    assert by_name(found)["t_a"].verdict == "new"


def test_the_run_on_the_base_commit_wins_over_a_later_one(history, npu):
    pr = builders.pull_request(9, HEAD)
    pushed(pr, hours=1)
    history.baseline(npu, {"t_a": "failed"}, sha=BASE, hours=30, event="push")
    history.baseline(npu, {"t_a": "passed"}, sha="d" * 40, hours=5)
    history.pr_job(npu, pr, {"t_a": "failed"}, hours=0.5)

    found = failing_queries.failing_tests(allowlisted.backend("acme/npu"), pr=9)

    assert (found.baseline.rule, found.baseline.sha, found.baseline.event) == ("base", BASE, "push")
    assert by_name(found)["t_a"].verdict == "broken-baseline"


def test_a_baseline_run_without_a_test_report_is_not_a_baseline(history, npu):
    pr = builders.pull_request(10, HEAD)
    pushed(pr, hours=1)
    builders.job(npu, name="build", event_type="nightly", head_sha=BASE, finished=builders.ago(hours=5))
    history.pr_job(npu, pr, {"t_a": "failed"}, hours=0.5)

    found = failing_queries.failing_tests(allowlisted.backend("acme/npu"), pr=10)

    assert found.baseline is None and by_name(found)["t_a"].classes == ("no baseline",)
    assert by_name(found)["t_a"].verdict == "new"


def test_the_flakiness_score_counts_flips_over_the_last_20_results(history, npu):
    # Oldest first: one failure, ten passes, ten failures. The oldest falls out of the window of 20, so the score is
    # 1 flip / 19 (with it, 2 / 20); the failures began with the 11th newest result.
    results = ["failed"] + ["passed"] * 10 + ["failed"] * 10
    for n, status in enumerate(results):
        history.baseline(npu, {"t_s": status}, sha=f"{n:040x}", hours=100 - n)

    found = failing_queries.failing_tests(allowlisted.backend("acme/npu"))

    t = by_name(found)["t_s"]
    assert (t.results, t.flakiness, t.flakiness_pct) == (20, round(1 / 19, 4), 5.3)
    assert t.streak == 10 and t.since_sha == f"{11:040x}"
    assert not t.flaky
    assert (found.sha, found.baseline.rule, found.baseline.sha) == (f"{20:040x}", "previous", f"{19:040x}")
    assert t.verdict == "broken-baseline"


def test_a_test_that_alternates_scores_one_and_is_flaky_when_one_sha_saw_both(history, npu):
    for n, status in enumerate(["passed", "failed", "passed", "failed"]):
        history.baseline(npu, {"t_s": status}, sha=f"{n:040x}", hours=10 - n)
    history.baseline(npu, {"t_s": "passed"}, sha=f"{3:040x}", hours=5.5, name="test-2")  # same SHA, another job

    t = by_name(failing_queries.failing_tests(allowlisted.backend("acme/npu")))["t_s"]

    # Read: at its newest SHA a failure and a pass, then pass, fail, pass: 3 flips over 5 results.
    assert t.flakiness == 0.75 and t.results == 5
    assert t.flaky_why == ("passed and failed at one SHA", "flakiness 75 % over its last 5 results")
    assert t.verdict == "flaky"


def test_only_here_needs_a_pass_elsewhere_and_no_failure(history, npu, xpu, make_backend):
    mps = make_backend(repo="apple/mps", level="L2", device="mps")
    history.baseline(npu, {"t_a": "failed", "t_b": "failed"}, sha=BASE, hours=3)
    history.baseline(xpu, {"t_a": "passed", "t_b": "passed"}, sha=BASE, hours=3)
    history.baseline(mps, {"t_b": "failed"}, sha=BASE, hours=3, event="push")

    tests = by_name(failing_queries.failing_tests(allowlisted.backend("acme/npu")))

    assert tests["t_a"].only_here and tests["t_a"].elsewhere == "passes"
    assert not tests["t_b"].only_here and tests["t_b"].elsewhere == "fails"
    assert tests["t_a"].classes == ("no baseline", "only here") and tests["t_a"].verdict == "new"


def test_the_first_failure_message_line_and_the_failing_jobs_are_kept(history, npu):
    history.baseline(npu, {"t_a": "failed"}, sha=BASE, hours=3)
    history.baseline(npu, {"t_a": "error"}, sha=BASE, hours=3, name="test-2")

    t = by_name(failing_queries.failing_tests(allowlisted.backend("acme/npu")))["t_a"]

    assert t.jobs == ("ci / test-1", "ci / test-2")
    assert t.message == "AssertionError: boom" and t.status == "failed"
    assert t.since is not None and t.since > builders.ago(hours=1) - timedelta(minutes=5)  # report time
