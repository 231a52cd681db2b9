"""Hand-built test histories for the failing-tests view: jobs with JUnit reports stored and parsed as the relay does
(so ClickHouse's copy reads the same bytes), each test given a status by name.

A test named ``t`` reads ``test_x.py::TestX::t``. Statuses: passed, failed, error, skipped, and flaky (passed after a
rerun).
"""

import io
from datetime import timedelta

from ootci.models import Delivery, JobResult, TestReport
from relay.reports import pull
from tests.hud import builders

BASE = "b" * 40
HEAD = "a" * 40


def generic_id(name: str) -> str:
    return f"test_x.py::TestX::{name}"


def junit(statuses: dict[str, str]) -> bytes:
    body = {
        "passed": "",
        "flaky": '<rerun message="flaky">first try</rerun>',
        "failed": '<failure message="AssertionError: boom">Traceback\nAssertionError: boom</failure>',
        "error": '<error message="RuntimeError: setup">RuntimeError: setup</error>',
        "skipped": '<skipped message="not here"/>',
    }
    cases = "".join(
        f'<testcase classname="test_x.TestX" name="{name}" time="0.1">{body[status]}</testcase>'
        for name, status in statuses.items()
    )
    return f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>'.encode()


class History:
    """Builds jobs with parsed reports; ``capture`` is pytest-django's django_capture_on_commit_callbacks."""

    def __init__(self, capture) -> None:
        self.capture = capture

    def report(self, job: JobResult, statuses: dict[str, str]) -> TestReport:
        with self.capture(execute=True):
            received = pull.spooled(io.BytesIO(junit(statuses)), limit=10**8)
            report, _ = pull.report_store(job=job, received=received, source="upload")
        report.refresh_from_db()
        assert report.state == "parsed", report.reason
        return report

    def baseline(self, backend, statuses: dict[str, str], *, sha: str, hours: float, event="nightly", name="test-1"):
        """A nightly (or push) job at ``sha`` finished ``hours`` ago, with its report."""
        job = builders.job(
            backend,
            name=name,
            conclusion=conclusion(statuses),
            finished=builders.ago(hours=hours),
            event_type=event,
            head_sha=sha,
        )
        self.report(job, statuses)
        return job

    def pr_job(self, backend, pr, statuses: dict[str, str], *, name="test-1", sha=HEAD, hours: float = 1, **fields):
        """A job of ``pr`` at ``sha`` finished ``hours`` ago, with its report (``run_attempt`` etc. in fields)."""
        job = builders.job(
            backend,
            name=name,
            conclusion=conclusion(statuses),
            finished=builders.ago(hours=hours),
            event_type="pull_request",
            pr_number=pr.number,
            head_sha=sha,
            **fields,
        )
        self.report(job, statuses)
        return job


def conclusion(statuses: dict[str, str]) -> str:
    return "failure" if {"failed", "error"} & set(statuses.values()) else "success"


def pushed(pr, *, base: str = BASE, hours: float = 2, sha: str = HEAD) -> Delivery:
    """The webhook delivery that pushed the PR's head ``hours`` ago, naming its base commit."""
    return Delivery.objects.create(
        delivery_id=f"push-{pr.number}-{sha[:7]}-{hours}",
        event="pull_request",
        action="synchronize",
        upstream_repo="pytorch/pytorch",
        head_sha=sha,
        pull_request=pr,
        received_at=builders.ago(hours=hours),
        payload={"pull_request": {"number": pr.number, "head": {"sha": sha}, "base": {"sha": base}}},
    )


def shift(delta: timedelta, *reports: TestReport) -> None:
    """Move reports' arrival time (history order) by ``delta``."""
    for report in reports:
        TestReport.objects.filter(pk=report.pk).update(received_at=report.received_at + delta)
