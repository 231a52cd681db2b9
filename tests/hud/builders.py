"""Small builders for HUD tests: deliveries, dispatches, job results and their test reports at times relative to now."""

import io
import itertools
from datetime import timedelta
from xml.sax.saxutils import escape

from django.utils import timezone

from ootci.models import Delivery, Dispatch, JobResult, PullRequest, TestReport

_ids = itertools.count(1)


def ago(**delta):
    return timezone.now() - timedelta(**delta)


def pull_request(number: int, sha: str, **fields) -> PullRequest:
    fields.setdefault("title", f"PR {number}")
    fields.setdefault("author", "alice")
    return PullRequest.objects.create(upstream_repo="pytorch/pytorch", number=number, head_sha=sha, **fields)


def dispatch(backend, *, sha: str, at, pr: PullRequest | None = None, event: str = "pull_request", status="sent"):
    delivery = Delivery.objects.create(
        delivery_id=f"d-{next(_ids)}",
        event=event,
        upstream_repo="pytorch/pytorch",
        head_sha=sha,
        pull_request=pr,
        received_at=at,
        payload={},
    )
    return Dispatch.objects.create(delivery=delivery, backend=backend, status=status, created_at=at, sent_at=at)


def job(backend, *, name: str, conclusion: str = "success", finished=None, dispatch_=None, **fields) -> JobResult:
    """A completed job (or in_progress with conclusion=""), finished at ``finished`` (default 1 hour ago)."""
    finished = finished or ago(hours=1)
    status = "completed" if conclusion else "in_progress"
    delivery = dispatch_.delivery if dispatch_ else None
    fields.setdefault("started_at", finished - timedelta(minutes=30))
    fields.setdefault("created_at", fields["started_at"] or finished)
    fields.setdefault("event_type", delivery.event if delivery else "nightly")
    fields.setdefault("head_sha", delivery.head_sha if delivery else "f" * 40)
    fields.setdefault("pr_number", delivery.pull_request.number if delivery and delivery.pull_request else None)
    fields.setdefault("run_id", str(next(_ids)))
    return JobResult.objects.create(
        backend=backend,
        dispatch=dispatch_,
        delivery_id=delivery.delivery_id if delivery else fields["head_sha"],
        upstream_repo="pytorch/pytorch",
        workflow_name=fields.pop("workflow_name", "ci"),
        job_name=name,
        status=status,
        conclusion=conclusion,
        completed_at=finished if conclusion else None,
        level=backend.level,
        **fields,
    )


def report_with(job: JobResult, cases: dict[str, str | tuple], *, at=None) -> TestReport:
    """A parsed test report of ``job`` that arrived at ``at`` (default now): one pytest-style case per entry of
    ``cases``, ``"module.Class::name": status`` or ``(status, reruns, message)``, with status passed, failed, error,
    skipped, xfail or xpass. The bytes go to the intermediate store (TEST_REPORTS_URL) and are parsed by the relay's
    own parser, so PostgreSQL's and ClickHouse's copies (replicated from those bytes) hold the same cases."""
    from relay.reports import pull

    rows = [_junit_case(key, *(spec if isinstance(spec, tuple) else (spec,))) for key, spec in cases.items()]
    body = f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{"".join(rows)}</testsuite></testsuites>'
    received = pull.spooled(io.BytesIO(body.encode()), limit=10**8)
    report, _ = pull.report_store(job=job, received=received, source="upload")
    TestReport.objects.filter(pk=report.pk).update(received_at=at or timezone.now())  # the parse reads its arrival
    assert pull.report_parse(report_id=report.pk) == "parsed", report.reason
    report.refresh_from_db()
    return report


def _junit_case(key: str, status: str, reruns: int = 0, message: str = "") -> str:
    classname, _, name = key.partition("::")
    inner = '<rerun message="flaky">try</rerun>' * reruns
    text = _attr(message or f"AssertionError: {name} {status}")
    inner += {
        "passed": "",
        "failed": f'<failure message="{text}">{text}</failure>',
        "xpass": f'<failure message="[XPASS(strict)] {text}"/>',
        "error": f'<error message="{text}">{text}</error>',
        "skipped": '<skipped type="pytest.skip" message="not here"/>',
        "xfail": '<skipped type="pytest.xfail" message="known"/>',
    }[status]
    return f'<testcase classname="{_attr(classname)}" name="{_attr(name)}" time="0.1">{inner}</testcase>'


def _attr(text: str) -> str:
    return escape(text, {'"': "&quot;", "\n": "&#10;"})
