"""Test reports of downstream jobs: received (direct upload) or pulled (the run's GitHub Actions artifact), kept raw
in the intermediate store, then parsed by a separate task into TestReport/TestCase rows.

Neither way in fetches a URL the downstream chose: an upload is bound to a job attempt of the verified repo, and a
pull downloads, as the App, an artifact of that attempt's own run by ids (DESIGN §1). The raw bytes are stored
before any row points at them, so a parser crash or a deploy loses nothing: ``manage.py reparse_test_reports``
(or the admin's "re-parse") parses them again.
"""

import hashlib
import logging
import re
import tempfile
import zlib
from dataclasses import dataclass
from datetime import timedelta
from typing import BinaryIO

from django.conf import settings
from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone
from django_q.models import Schedule
from django_q.tasks import async_task, schedule

from ootci import baseline, case_days, case_recent, claims, jobs, ledger
from ootci.environment import environment_from_properties
from ootci.models import BISECT_EVENT, Event, JobResult, TestCase, TestReport
from ootci.replication import job_results_changed
from ootci.reports import junit
from ootci.verdicts import BASELINE_EVENTS
from relay.github import check_runs
from relay.github import client as github
from relay.reliability import archive
from relay.reports.artifacts import job_artifacts

logger = logging.getLogger(__name__)

PREFIX = "reports"
SPOOL_IN_MEMORY = 8 * 1024 * 1024
READ_CHUNK = 1024 * 1024
RUN_ID = re.compile(r"^[0-9]{1,20}$")
PARSE_CLAIM = timedelta(minutes=10)  # a parse that died lets its claim go after this
BATCH = 2000
PULL_ATTEMPTS = 4
PULL_RETRY_SECONDS = 60


class UploadRefused(Exception):
    def __init__(self, status_code: int, detail: str):
        super().__init__(detail)
        self.status_code = status_code
        self.detail = detail


@dataclass(frozen=True)
class Received:
    """Bytes spooled from the wire: their sha256, size and the spool (at position 0)."""

    spool: BinaryIO
    digest: str
    size: int


def spooled(stream: BinaryIO, *, limit: int) -> Received:
    """Copy ``stream`` into a spool (memory, then disk), hashing it; over ``limit`` bytes raises UploadRefused 413."""
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115 - handed to the caller, who closes it
    digest, size = hashlib.sha256(), 0
    while chunk := stream.read(READ_CHUNK):
        size += len(chunk)
        if size > limit:
            spool.close()
            raise UploadRefused(413, f"The report is over {limit} bytes (50 MB compressed).")
        digest.update(chunk)
        spool.write(chunk)
    spool.seek(0)
    return Received(spool, digest.hexdigest(), size)


def report_key(job: JobResult, digest: str) -> str:
    return "/".join(
        [PREFIX, archive.key_part(job.backend.repo), archive.key_part(job.run_id), str(job.run_attempt), digest]
    )


def report_store(
    *,
    job: JobResult,
    received: Received,
    source: str,
    content_type: str = "",
    content_encoding: str = "",
    artifact: dict | None = None,
    only_one: bool = False,
) -> tuple[TestReport, bool]:
    """Keep the bytes in the intermediate store, then record them as a pending report of ``job`` and queue its
    parse. Returns (report, created): the same bytes again are the report already kept. With ``only_one`` another
    report of the attempt is a conflict (UploadRefused 409)."""
    key = report_key(job, received.digest)
    archive.reports_store().put(key, received.spool)  # before the row: a row never points at missing bytes
    with transaction.atomic():
        JobResult.objects.select_for_update().filter(pk=job.pk).first()  # one report decision per attempt at a time
        existing = TestReport.objects.filter(job=job).order_by("id")
        same = existing.filter(digest=received.digest).first()
        if same is not None:
            return same, False
        if only_one and existing.exists():
            raise UploadRefused(409, f"Job attempt {job.pk} already has a different test report.")
        report = TestReport.objects.create(
            job=job,
            source=source,
            artifact_id=(artifact or {}).get("id"),
            artifact_name=(artifact or {}).get("name", "")[:255],
            digest=received.digest,
            size=received.size,
            content_type=content_type[:100],
            content_encoding=content_encoding[:20],
            store_key=key,
        )
        transaction.on_commit(lambda: async_task("relay.tasks.report_parse", report.pk, save=False), robust=True)
    return report, True


# --- direct upload ----------------------------------------------------------------------------------------------------


def upload_job(
    *, backend_id: int, delivery_id: str, workflow: str | None, job: str, run_id: str, run_attempt: int
) -> JobResult:
    """The job attempt an upload names, of the verified backend: 403 when it is another repo's, 404 when none. With no
    ``workflow`` (the job-log upload's legacy ``job_name``) the job name must be unique in the run: 409 when not."""
    attempts = JobResult.objects.select_related("backend").filter(
        delivery_id__in={delivery_id, delivery_id.lower()}, job_name=job, run_id=run_id, run_attempt=run_attempt
    )
    if workflow is not None:
        attempts = attempts.filter(workflow_name=workflow)
    found = list(attempts[:10])
    mine = [attempt for attempt in found if attempt.backend_id == backend_id]
    if len(mine) > 1:
        workflows = ", ".join(sorted({attempt.workflow_name for attempt in mine}))
        raise UploadRefused(409, f"Job {job!r} is in several workflows of that run ({workflows}): name the workflow.")
    if mine:
        return mine[0]
    if found:
        raise UploadRefused(403, "That job attempt was reported by another repository: it is not yours to report on.")
    named = f"{workflow}/{job}" if workflow is not None else job
    raise UploadRefused(404, f"No job attempt {named} run {run_id} attempt {run_attempt} of delivery {delivery_id!r}.")


def upload_sniff(received: Received, *, content_encoding: str) -> None:
    """422 unless the body starts like JUnit XML, a zip or a gzip stream (after its Content-Encoding)."""
    head = received.spool.read(512)
    received.spool.seek(0)
    if content_encoding == "gzip":
        try:
            head = zlib.decompressobj(wbits=31).decompress(head, 64)
        except zlib.error as e:
            raise UploadRefused(422, f"Content-Encoding is gzip but the body is not gzip ({e}).") from e
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not (stripped.startswith((b"<", junit.ZIP_MAGIC, junit.EMPTY_ZIP_MAGIC, junit.GZIP_MAGIC))):
        raise UploadRefused(422, "The body is not a JUnit XML file, nor a zip or tar.gz of them.")


# --- artifact pull ----------------------------------------------------------------------------------------------------


def job_reports_pull(*, job_id: int, attempt: int = 1, artifacts: list[dict] | None = None) -> dict[str, int]:
    """Pull the test reports of a completed GitHub Actions job attempt from its run's artifacts, as the App:
    ``artifacts`` when the follow-up's listing of the run found them, else its own listing. GitHub trouble is retried
    later (PULL_ATTEMPTS in all); what was pulled before is not pulled again."""
    job = JobResult.objects.select_related("backend").filter(pk=job_id).first()
    if job is None or not RUN_ID.match(job.run_id):
        return {"pulled": 0}
    try:
        return {"pulled": _job_reports_pulled(job, job_artifacts(job) if artifacts is None else artifacts)}
    except github.GitHubError as e:
        logger.warning("job %s: test reports not pulled (attempt %s): %s", job_id, attempt, e)
        if e.retryable and attempt < PULL_ATTEMPTS:
            wait = getattr(e, "wait_seconds", PULL_RETRY_SECONDS * attempt)
            schedule(
                "relay.tasks.job_reports_pull",
                job_id,
                attempt + 1,
                schedule_type=Schedule.ONCE,
                next_run=timezone.now() + timedelta(seconds=wait),
            )
        return {"pulled": 0}


def _job_reports_pulled(job: JobResult, artifacts: list[dict]) -> int:
    repo = job.backend.repo
    pulled = 0
    for item in artifacts:
        if TestReport.objects.filter(job=job, artifact_id=item["id"]).exists():
            continue  # pulled before: the task runs twice safely
        if item["size_in_bytes"] > junit.MAX_COMPRESSED:
            logger.warning("job %s: artifact %s is %s bytes: over the cap", job.pk, item["id"], item["size_in_bytes"])
            continue
        received = _artifact_received(repo=repo, artifact_id=item["id"])
        if received is None:
            continue
        with received.spool:
            _, created = report_store(
                job=job,
                received=received,
                source=TestReport.Source.ARTIFACT,
                content_type="application/zip",
                artifact=item,
            )
        pulled += created
    return pulled


def _artifact_received(*, repo: str, artifact_id: int) -> Received | None:
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as download:
        try:
            github.artifact_download(repo=repo, artifact_id=artifact_id, into=download, max_bytes=junit.MAX_COMPRESSED)
        except github.TooLarge as e:
            logger.warning("%s: not pulled", e)
            return None
        download.seek(0)
        return spooled(download, limit=junit.MAX_COMPRESSED)


# --- parsing ----------------------------------------------------------------------------------------------------------


def report_parse(*, report_id: int) -> str:
    """Parse a pending report from the intermediate store; all its rows or none. Safe to run twice, and never
    holding a transaction or a row lock while it reads the store and parses (up to 50 MB): the task claims the report
    by a conditional UPDATE, reads and parses, then writes its rows in one short transaction if it still holds it."""
    # Claimed while parsing: not pending any more, or another parse's fresh claim (one that died lets go after
    # PARSE_CLAIM), means this one has nothing to do.
    pending = TestReport.objects.filter(pk=report_id, state=TestReport.State.PENDING)
    claim = claims.claim(pending, "parse_claimed_at", stale=PARSE_CLAIM)
    report = TestReport.objects.select_related("job__backend").filter(pk=report_id).first()
    if report is None or claim is None:
        return (
            report.state if report and report.state != TestReport.State.PENDING else "missing" if not report else "busy"
        )
    job = report.job
    try:
        parsed = junit.stored_report_parse(report)
        others = TestReport.objects.filter(job=job, state=TestReport.State.PARSED).exclude(pk=report.pk)
        if parsed.cases + (others.aggregate(n=Sum("cases"))["n"] or 0) > junit.MAX_CASES:
            raise junit.ReportRefused(f"The job attempt's reports hold more than {junit.MAX_CASES} test cases.")
    except junit.ReportRefused as e:
        return _report_ended_if_held(report, claim, TestReport.State.REFUSED, e.reason)
    except Exception as e:  # the stored bytes cannot be read (store down, key gone): recorded, re-parse later
        logger.exception("reading test report %s failed", report.pk)
        reason = f"The stored report could not be read: {e}"[:2000]
        return _report_ended_if_held(report, claim, TestReport.State.FAILED, reason)
    with transaction.atomic():
        if not _still_held(report.pk, claim):
            return "superseded"  # marked for a re-parse meanwhile: that parse writes the rows
        TestCase.objects.filter(report=report).delete()
        TestCase.objects.bulk_create(
            (TestCase(report=report, job=job, **vars(case)) for case in parsed.kept), batch_size=BATCH
        )
        counts = parsed.counts
        report.cases, report.passed, report.failed = parsed.cases, counts["passed"], counts["failed"]
        report.errors, report.skipped = counts["error"], counts["skipped"]
        report.xfailed, report.xpassed = counts["xfail"], counts["xpass"]
        report.reruns, report.duration = parsed.reruns, round(parsed.duration, 3)
        _report_ended(report, TestReport.State.PARSED, "")
        job_counts_from_reports(job)
        if ledger.is_baseline_run(job):  # the skip ledger of a baseline run, with its diff against the one before
            transaction.on_commit(lambda: async_task("relay.tasks.ledger_record", job.pk), robust=True)
        if job.event_type in BASELINE_EVENTS:  # the breaks it opens or closes (relay.breaks)
            transaction.on_commit(lambda: async_task("relay.tasks.breaks_after_report", job.pk), robust=True)
        elif job.event_type == BISECT_EVENT:  # the bisection step it decides
            transaction.on_commit(lambda: async_task("relay.tasks.bisect_step_report", job.pk), robust=True)
        case_recent.recent_add(report)  # the classification's history: locks the backend until the commit
        case_days.case_days_add(report)  # last: it locks the report's day until the commit
    if found := environment_from_properties(parsed.properties):  # what the callback did not state
        jobs.environment_fill(job_id=job.pk, found=found)
    return TestReport.State.PARSED


def _still_held(report_id: int, claim) -> bool:
    held = TestReport.objects.select_for_update().filter(
        pk=report_id, state=TestReport.State.PENDING, parse_claimed_at=claim
    )
    return held.exists()


def _report_ended_if_held(report: TestReport, claim, state: str, reason: str) -> str:
    with transaction.atomic():
        if not _still_held(report.pk, claim):
            return "superseded"
        return _report_ended(report, state, reason)


def _report_ended(report: TestReport, state: str, reason: str) -> str:
    if state != TestReport.State.PARSED:
        TestCase.objects.filter(report=report).delete()
        logger.warning("test report %s %s: %s", report.pk, state, reason)
    report.state, report.reason, report.parsed_at = state, reason, timezone.now()
    report.parse_claimed_at = None
    report.save()
    return state


def job_counts_from_reports(job: JobResult) -> None:
    """The job's test counts and failed tests as its parsed reports give them; its check run follows."""
    totals = TestReport.objects.filter(job=job, state=TestReport.State.PARSED).aggregate(
        passed=Sum("passed"),
        failed=Sum("failed"),
        errors=Sum("errors"),
        xpassed=Sum("xpassed"),
        skipped=Sum("skipped"),
        xfailed=Sum("xfailed"),
    )
    if totals["passed"] is None:
        return
    failing = TestCase.objects.filter(job=job, status__in=TestCase.FAILING).order_by("id")
    names = failing.values_list("test_id", flat=True)[: 2 * 1000]
    JobResult.objects.filter(pk=job.pk).update(
        passed=totals["passed"],
        failed=totals["failed"] + totals["errors"] + totals["xpassed"],
        skipped=totals["skipped"] + totals["xfailed"],
        failed_tests=jobs.failed_tests_capped(list(names)),
        updated_at=timezone.now(),  # update() skips auto_now; replication follows it
    )
    job_results_changed()
    job.refresh_from_db()
    baseline.job_verdict(job)
    if job.event_type == Event.PULL_REQUEST:  # the PR comment groups its failures by verdict: bring it along
        transaction.on_commit(lambda: async_task("relay.tasks.job_alerts", job.pk, save=False), robust=True)
    if job.dispatch_id is not None:
        check_runs.check_run_after_report(job=job, pull_request_id=job.dispatch.delivery.pull_request_id)


def reports_clean(*, now=None) -> int:
    """Delete raw reports older than TEST_REPORTS_RETENTION_DAYS from the store (their parsed rows stay)."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.TEST_REPORTS_RETENTION_DAYS)
    old = archive.reports_store().expired_delete(PREFIX + "/", cutoff=cutoff)
    if old:
        # A parsed report keeps its rows; one never parsed can no longer be, and says so.
        TestReport.objects.filter(Q(store_key__in=old), state=TestReport.State.PENDING).update(
            state=TestReport.State.FAILED, reason="The raw report expired before it was parsed."
        )
    return len(old)
