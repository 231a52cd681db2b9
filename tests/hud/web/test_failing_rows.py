"""The failing-tests table's rows, written by ``hud.templatetags.hud_rows.failing_test_rows`` instead of the
template's tags (the PR page renders about a thousand of them): the same cells the template gave, escaped."""

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from django.template import Context, Template
from django.utils import timezone

from hud.failing.classes import FailingTest

BACKEND = SimpleNamespace(org="acme", name="npu")
TEMPLATE = Template("{% load hud_rows %}{% failing_test_rows tests backend %}")


def failing(**changes) -> FailingTest:
    fields = {
        "test_id": "test_ops.py::TestOps::test_add",
        "status": "failed",
        "message": "",
        "job_id": 7,
        "jobs": ("test-1",),
        "baseline": "passed",
        "elsewhere": "passes",
        "flaky_why": (),
        "flakiness": None,
        "results": 0,
        "since": None,
        "since_sha": "",
        "streak": 0,
    }
    return FailingTest(**(fields | changes))


def rows(*tests: FailingTest) -> str:
    return TEMPLATE.render(Context({"tests": tests, "backend": BACKEND}))


def test_a_new_failure_only_here_without_history():
    html = rows(failing())
    assert html == (
        '<tr data-test="test_ops.py::TestOps::test_add"><td><code>test_ops.py::TestOps::test_add</code></td>'
        '<td><span class="badge bad" data-verdict="new">new</span>'
        ' <span class="badge neutral" data-class="only here">only here</span></td>'
        '<td>passed</td><td>passes</td><td class="num"><span class="muted">—</span> <span class="muted">(0)</span></td>'
        '<td></td><td><a href="/oot/acme/npu/jobs/7/">test-1</a></td></tr>'
    )


def test_text_from_reports_is_escaped():
    html = rows(failing(test_id='t.py::test_<b>"x"', message="<script>alert(1)</script>", jobs=("a&b",)))
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'data-test="t.py::test_&lt;b&gt;&quot;x&quot;"' in html and ">a&amp;b</a>" in html


def test_a_flaky_test_failing_for_twenty_results_and_more():
    since = timezone.now() - timedelta(days=3)
    html = rows(
        failing(
            verdict="flaky",
            baseline="failing",
            elsewhere="fails",
            flaky_why=("flips 4 times", "passed on rerun"),
            flakiness=0.25,
            results=20,
            since=since,
            since_sha="0123456789abcdef",
            streak=20,
        )
    )
    assert '<span class="badge neutral" data-verdict="flaky">flaky</span>' in html and "only here" not in html
    assert '<br><span class="muted" data-evidence>flips 4 times, passed on rerun</span>' in html
    assert '<td><span class="fail">failed</span></td><td><span class="fail">fails too</span></td>' in html
    assert '<td class="num">25.0% <span class="muted">(20)</span></td>' in html
    at = since.astimezone(UTC)
    assert f'<time datetime="{at.isoformat()}" title="{at:%Y-%m-%d %H:%M} UTC">3d ago</time>' in html
    assert '<span class="mono muted">0123456</span> · 20+ in a row' in html


def test_baseline_and_other_backends_not_run_and_one_row_per_test():
    html = rows(
        failing(baseline="absent", elsewhere="not run", since=datetime(2026, 1, 2, tzinfo=UTC), streak=3),
        failing(baseline=""),
    )
    assert html.count("<tr data-test=") == 2
    assert '<td><span class="muted">not run</span></td><td><span class="muted">not run</span></td>' in html
    assert "· 3 in a row" in html and '<td><span class="muted">—</span></td><td>passes</td>' in html
