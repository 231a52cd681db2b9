"""The HUD's table rows written in Python rather than as template tags and includes: the PR page renders a dozen
backends' failing tests (about a thousand rows) and jobs (about 200, each failed one with its failure line and first
failed tests), and each row as template nodes cost several times as much. Each gives the HTML its template gave
(``tests/hud/web/test_failing_rows.py``, ``test_job_rows.py``)."""

from datetime import datetime

from django import template
from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import mark_safe
from django.utils.text import Truncator
from django.utils.timezone import template_localtime

from hud.templatetags.hud import ago, duration, history_url, letter, outcome_text, pct, running_for, short_sha, utc

register = template.Library()

NOT_RUN = '<span class="muted">not run</span>'
NO_VALUE = '<span class="muted">—</span>'
BASELINE_CELL = {"passed": "passed", "failing": '<span class="fail">failed</span>', "absent": NOT_RUN}
ELSEWHERE_CELL = {"passes": "passes", "fails": '<span class="fail">fails too</span>'}
ONLY_HERE = ' <span class="badge neutral" data-class="only here">only here</span>'


@register.simple_tag
def failing_test_rows(tests, backend) -> str:
    """The rows of a failing-tests table (``_failing_tests.html``), written here rather than in the template: the PR
    page shows up to 12 backends' tables, about a thousand rows: about 85 µs a row as the template's tags, 49 µs with
    ``format_html`` and the job's URL reversed per row, 12 µs written out here."""
    job_url = reverse("hud:job", args=(backend.org, backend.name, 0)).removesuffix("0/")
    return mark_safe("".join(_failing_test_row(t, job_url) for t in tests))


def _failing_test_row(t, job_url: str) -> str:
    test_id = escape(t.test_id)
    message = f'<br><span class="mono muted">{escape(t.message)}</span>' if t.message else ""
    badge = "bad" if t.verdict == "new" else "neutral"
    verdict = f'<span class="badge {badge}" data-verdict="{t.verdict}">{t.verdict}</span>'
    if t.only_here:
        verdict += ONLY_HERE
    if t.flaky_why:
        verdict += f'<br><span class="muted" data-evidence>{escape(", ".join(t.flaky_why))}</span>'
    flakiness = NO_VALUE if t.flakiness is None else pct(t.flakiness_pct)
    since = ""
    if t.since:
        streak = "20+" if t.streak >= 20 else t.streak
        since = (
            f'<time datetime="{template_localtime(t.since).isoformat()}" title="{utc(t.since)}">{ago(t.since)}</time>'
            f' <span class="mono muted">{escape(short_sha(t.since_sha))}</span> · {streak} in a row'
        )
    return (
        f'<tr data-test="{test_id}"><td><code>{test_id}</code>{message}</td><td>{verdict}</td>'
        f"<td>{BASELINE_CELL.get(t.baseline, NO_VALUE)}</td>"
        f"<td>{ELSEWHERE_CELL.get(t.elsewhere, NOT_RUN)}</td>"
        f'<td class="num">{flakiness} <span class="muted">({t.results})</span></td><td>{since}</td>'
        f'<td><a href="{job_url}{t.job_id}/">{escape(", ".join(t.jobs))}</a></td></tr>'
    )


VERDICT_TITLE = "the job's verdict: infra → disabled → flaky → broken-baseline → new, the worst of its failures"


@register.simple_tag
def failure_line(f) -> str:
    """A failed job's class badge, its failure line (or failed step), verdict, and what the relay did about it
    (``hud.failing.lines.FailureLine``)."""
    cls = escape(f.failure_class or "unknown")
    html = f'<span class="badge fc {cls}" title="class decided by: {escape(f.source_text)}">'
    html += f"{escape(f.failure_class or 'unclassified')}</span>"
    if f.line:
        html += f' <code class="failure-line">{escape(Truncator(f.line).chars(300))}</code>'
    elif f.failed_step:
        html += f" failed step: {escape(f.failed_step)}"
    if f.verdict:
        badge = "bad" if f.verdict in ("new", "unknown") else "neutral"
        verdict = escape(f.verdict)
        html += f' <span class="badge verdict {badge}" data-verdict="{verdict}" title="{VERDICT_TITLE}">'
        html += f"{verdict}</span>"
    if f.exonerated:
        html += f' <span class="muted" data-exonerated>check run neutral: {escape(f.exonerated)}</span>'
    if f.auto_retry:
        html += f' <span class="muted" data-auto-retry>{escape(f.auto_retry)}</span>'
    return mark_safe(html)


@register.simple_tag
def job_rows(jobs, backend, *, current=None, failures=None, reported=None, show_sha=False, show_tests=0) -> str:
    """The rows of a jobs table (``_job_head.html``'s columns), written here as ``failing_test_rows`` is: the PR
    page shows a dozen backends' jobs and earlier attempts, each failed one with its failure line (``failures``, by
    job id) and, when ``show_tests``, its first failed tests (``reported``: its report's cases, by job id; else the
    names its callback sent). ``current``: the job whose page this is."""
    job_url = reverse("hud:job", args=(backend.org, backend.name, 0)).removesuffix("0/")
    failures, reported = failures or {}, reported or {}
    rows = []
    for job in jobs:
        url = f"{job_url}{job.id}/"
        rows.append(_job_row(job, url, current=bool(current) and job.id == current, show_sha=show_sha))
        if f := failures.get(job.id):
            rows.append(f'\n<tr class="failure-row"><td></td><td colspan="8">{failure_line(f)}</td></tr>')
        cases = reported.get(job.id)
        if show_tests and (cases or job.failed_tests):
            tests = _first_failed(job, url, cases, show_tests)
            rows.append(f'\n<tr class="tests-row"><td></td><td colspan="8">{tests}</td></tr>')
        rows.append("\n")
    return mark_safe("".join(rows))


def _job_row(job, url: str, *, current: bool, show_sha: bool) -> str:
    outcome, text, column = escape(job.outcome), escape(outcome_text(job)), escape(job.column)
    here = ' current" aria-current="true"' if current else '"'
    sup = attempt = ""
    if job.run_attempt > 1:
        sup = f"<sup>{job.run_attempt}</sup>"
        attempt = f' <span class="badge neutral">attempt {job.run_attempt}</span>'
    name = f'<a href="{url}">{column}</a>'
    if show_sha:
        name += f' <span class="mono muted">{escape(short_sha(job.head_sha))}</span>'
    if current:
        name += ' <span class="badge current">this attempt</span>'
    tests = f"{job.passed} / {job.failed or 0} / {job.skipped or 0}" if job.passed is not None else "—"
    check = '<span class="muted">none</span>'
    if job.upstream_check_run_id:
        state = "in progress" if job.outcome == "running" else escape(job.conclusion)
        runs = f"https://github.com/{escape(job.upstream_repo)}/runs/{job.upstream_check_run_id}"
        check = f'<a href="{runs}">check run</a>: {state}'
    links = f'<a href="{escape(job.job_url)}">run</a>' if job.job_url else ""
    if job.artifact_url:
        links += f' · <a href="{escape(job.artifact_url)}">artifacts</a>'
    if job.outcome == "running":
        since = job.started_at or job.created_at
        at = f'<time datetime="{_iso(since)}" title="started {utc(since)}">running for {running_for(since)}</time>'
    else:
        at = f'<time datetime="{_iso(job.finished_at)}" title="{utc(job.finished_at)}">{ago(job.finished_at)}</time>'
    return (
        f'<tr class="{outcome}{here}>\n'
        f'  <td class="cell {outcome}"><a href="{url}" aria-label="{column}: {text}">{letter(job)}{sup}</a></td>\n'
        f"  <td>{name}</td>\n  <td>{text}{attempt}</td>\n"
        f'  <td class="num">{duration(job.execution_time)}</td>\n  <td class="num">{duration(job.queue_time)}</td>\n'
        f'  <td class="num">{tests}</td>\n  <td>{check}</td>\n  <td>{links}</td>\n  <td>{at}</td>\n</tr>'
    )


def _iso(moment: datetime | None) -> str:
    """The ``date:'c'`` of a template: ISO 8601 in the current time zone, "" when unknown."""
    return template_localtime(moment).isoformat() if moment else ""


def _first_failed(job, url: str, cases, show: int) -> str:
    """The first failed tests of a failing job: from its parsed report (``cases``), messages folded; else the names
    its callback sent."""
    items = []
    if cases:
        for c in cases:
            item = f"<li>{linked_test(c.test_id)}"
            if c.reruns:
                item += f' <span class="badge neutral">rerun ×{c.reruns}</span>'
            if c.message:
                item += (
                    f'<details><summary><span class="mono">{escape(c.first_line)}</span></summary>'
                    f"<pre>{escape(c.message)}</pre></details>"
                )
            items.append(item + "</li>")
        if (job.failed or 0) > len(cases):
            items.append(f'<li><a href="{url}">all {job.failed} failed tests ›</a></li>')
    else:
        items += [f"<li><code>{escape(t)}</code></li>" for t in job.failed_tests[:show]]
        if len(job.failed_tests) > show:
            items.append(f'<li><a href="{url}">all {len(job.failed_tests)} failed tests ›</a></li>')
    label = f"First failed tests of {escape(job.column)}"
    return f'<ul class="first-failed" aria-label="{label}">' + "".join(f"\n  {i}" for i in items) + "\n</ul>"


@register.simple_tag
def linked_test(test_id: str) -> str:
    """A test id, linked to the test's page (every backend) when a URL can carry it."""
    url = history_url(test_id)
    code = f"<code>{escape(test_id)}</code>"
    return mark_safe(f'<a href="{escape(url)}" title="This test on every backend">{code}</a>' if url else code)
