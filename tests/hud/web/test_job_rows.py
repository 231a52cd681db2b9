"""The jobs table's rows, written by ``hud.templatetags.hud_rows.job_rows`` instead of an include of a template per row
(the PR page renders about 200 with their failure lines and first failed tests): the same HTML the template gave.

BEFORE (``job_row_before.html``) is that template, ``_job_row.html`` with its includes (``_failure_line.html``,
``_first_failed.html``, ``_test_link.html``) inlined as they were when the tag replaced them; both render the same
jobs, and their HTML must be equal but for the line breaks and indentation between tags."""

import re
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

from django.template import Context, Template
from django.utils import timezone

from hud.failing.lines import FailureLine
from hud.history.results import CaseInfo
from hud.stores.types import Job

BACKEND = SimpleNamespace(org="acme", name="npu")
HERE = Path(__file__).parent
BEFORE = Template("{% load hud %}{% for job in jobs %}" + (HERE / "job_row_before.html").read_text() + "{% endfor %}")
AFTER = Template(
    "{% load hud_rows %}{% job_rows jobs backend current=current failures=failures reported=reported "
    "show_sha=show_sha show_tests=show_tests %}"
)
NOW = timezone.now()


def job(n: int, **changes) -> Job:
    fields = {
        "id": n,
        "backend_id": 1,
        "event_type": "pull_request",
        "pr_number": 7,
        "head_sha": f"{n:040x}",
        "delivery_id": "d",
        "workflow_name": "ci",
        "job_name": f"test (default, {n}, 4)",
        "run_id": "99",
        "run_attempt": 1,
        "check_run_id": str(1000 + n),
        "status": "completed",
        "conclusion": "success",
        "outcome": "success",
        "started_at": NOW - timedelta(minutes=40),
        "completed_at": NOW - timedelta(minutes=5),
        "created_at": NOW - timedelta(minutes=50),
        "finished_at": NOW - timedelta(minutes=5),
        "queue_time": 600.0,
        "execution_time": 2100.0,
        "passed": 120,
        "failed": 0,
        "skipped": 3,
        "failed_tests": (),
        "run_url": "https://github.com/acme/npu/actions/runs/99",
        "artifact_url": "",
        "level": "L3",
        "upstream_check_run_id": None,
        "one_shot": False,
        "relay_decided": False,
        "source": "callback",
        "upstream_repo": "pytorch/pytorch",
    }
    return Job(**(fields | changes))


def failure(n: int, **changes) -> FailureLine:
    fields = {
        "job_id": n,
        "failure_class": "test",
        "source": "rule",
        "source_text": "a log rule",
        "rule_name": "pytest",
        "line": "FAILED test_ops.py::TestOps::test_add - AssertionError",
        "line_number": 120,
        "context": (),
        "line_url": "",
        "failed_step": "",
        "problem": "",
    }
    return FailureLine(**(fields | changes))


def case(test_id: str, *, reruns: int = 0, message: str = "") -> CaseInfo:
    return CaseInfo(test_id, "test_ops.py", "TestOps", test_id, "failed", 1.5, reruns, message)


def both(jobs, **context) -> tuple[str, str]:
    context = {"jobs": jobs, "backend": BACKEND, "current": None, "failures": {}, "reported": {}} | context
    context.setdefault("show_sha", False)
    context.setdefault("show_tests", 0)
    old = dict(context)
    if not old["show_sha"]:
        del old["show_sha"]  # the template's includes passed them only when set
    if not old["show_tests"]:
        del old["show_tests"]
    return tuple(re.sub(r"\n *", "", t.render(Context(c))) for t, c in ((BEFORE, old), (AFTER, context)))


JOBS = [
    job(1),
    job(
        2, outcome="test", conclusion="failure", passed=100, failed=4, failed_tests=("a", "b", "c", "d"), run_attempt=2
    ),
    job(3, outcome="infra", conclusion="timed_out", passed=None, failed=None, skipped=None, queue_time=None),
    job(4, outcome="running", status="in_progress", conclusion="", started_at=None, execution_time=None),
    job(5, outcome="running", status="in_progress", conclusion="", upstream_check_run_id=555),
    job(6, outcome="skipped", conclusion="skipped", upstream_check_run_id=777, artifact_url="https://x/a?b=1&c=2"),
    job(7, outcome="test", conclusion="failure", workflow_name='ci <"nightly">', job_name="t&t", failed=None),
    job(8, outcome="infra", conclusion="cancelled", run_url="", check_run_id="", failed=2, failed_tests=("x <y>",)),
    job(9, conclusion="neutral", finished_at=NOW - timedelta(days=3), run_attempt=3),
    job(10, outcome="weird", conclusion="stale", failed=1),
]
FAILURES = {
    2: failure(2, verdict="new"),
    3: failure(3, failure_class="", line="", failed_step="Set up runner", verdict="unknown", source_text="none"),
    7: failure(7, line="E " + "x" * 400 + " <tail>", verdict="flaky", exonerated="already failing on the base"),
    8: failure(8, failure_class="infra", verdict="infra", auto_retry="re-run once by the relay (attempt 2)"),
    10: failure(10, failure_class="build", line="", failed_step="", verdict="broken-baseline"),
}
REPORTED = {
    2: [case("test_ops.py::TestOps::test_add", reruns=2, message="AssertionError: 1 != 2\nat line 3"), case("t<b>")],
    7: [case("bad\nid", message="  <pre> & more")],
    10: [case("test_one.py::test_x"), case("test_amp.py::test_a&b")],
}


def test_every_kind_of_job_renders_as_the_template_did():
    before, after = both(JOBS, failures=FAILURES, reported=REPORTED, show_tests=3)
    assert after == before
    assert after.count('<td class="cell ') == len(JOBS) and after.count('class="failure-row"') == len(FAILURES)
    assert after.count('class="tests-row"') == 4  # reported (2, 7, 10) or named by the callback (8)


def test_earlier_attempts_with_their_shas_and_the_job_pages_current_attempt():
    jobs = [replace(j, run_attempt=2) for j in JOBS[:4]] + JOBS[4:]
    assert both(jobs, failures=FAILURES, show_sha=True)[1] == both(jobs, failures=FAILURES, show_sha=True)[0]
    before, after = both(JOBS, current=4)
    assert after == before
    assert after.count('aria-current="true"') == 1 and "this attempt" in after


def test_text_from_callbacks_and_logs_is_escaped():
    _, after = both(JOBS, failures=FAILURES, reported=REPORTED, show_tests=3)
    assert "<script" not in after and "ci &lt;&quot;nightly&quot;&gt; / t&amp;t" in after
    assert "&lt;tail&gt;" not in after and "x" * 290 in after  # the line cut at 300 characters
    assert "<code>x &lt;y&gt;</code>" in after and "https://x/a?b=1&amp;c=2" in after


def test_no_jobs_no_rows():
    assert both([]) == ("", "")
