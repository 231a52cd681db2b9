"""Failed jobs' logs: fetched from GitHub (or uploaded), kept in the intermediate store, classified.

For every failed, cancelled or timed-out job of an L2+ backend, ``job_log_classify`` (a task, enqueued when the
completion is committed) finds the GitHub Actions job of the attempt by name, records its failed step, streams its
log into TEST_REPORTS_URL (never whole in memory), runs the rules over it (``relay.reports.classify``) and stores the
verdict of ``ootci.failures.rules.failure_verdict``: a ``JobFailure`` row, and its class on the JobResult, whose
generated ``outcome`` (the HUD's infra/test split) reads it. Non-GitHub CI uploads the log instead (``POST
/github/job-log``). Safe to run twice: the row is replaced, the same log stored under the same key.
"""

import hashlib
import logging
import re
from datetime import UTC, datetime, timedelta
from typing import BinaryIO
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django_q.tasks import async_task

from ootci import baseline, levels
from ootci.environment import environment_trimmed
from ootci.failures.rules import failure_verdict
from ootci.jobs import environment_fill
from ootci.models import FailureClass, FailureRule, JobFailure, JobResult
from ootci.replication import job_results_changed
from ootci.rows import prepared_cursor
from relay.github import client as github
from relay.reliability import archive
from relay.reports.artifacts import run_listing
from relay.reports.classify import Classification, Rule, StepWindow, log_classify
from relay.reports.signatures import signature

logger = logging.getLogger(__name__)

RULES = (
    f"SELECT id, name, regex, failure_class, priority FROM {FailureRule._meta.db_table}"
    " WHERE enabled AND (backend_id IS NULL OR backend_id = %s) ORDER BY priority DESC, name"
)
FAILED_CONCLUSIONS = frozenset({"failure", "cancelled", "timed_out"})
# A failed step of these is the runner's or the network's, whatever its log says (DESIGN: failed step → infra).
INFRA_STEPS = re.compile(r"^(set up job|set up runner|initialize containers|.*\bcheckout\b.*|complete runner)$", re.I)
LINE_KEPT = 2000  # characters of the matched line stored
LOG_PREFIX = "logs"
# A re-classification replaces every field of the job's row (``_verdict_store``).
REPLACED = [f.name for f in JobFailure._meta.concrete_fields if f.name not in ("id", "job")]
# The classified job's new class, and what the database derives from it (``outcome``) or others may have set since
# it was read: one statement, where update() and refresh_from_db() were two (tests/bench/bench_callback.py).
JOB_CLASSIFIED = (
    "UPDATE ootci_jobresult SET failure_class = %s, updated_at = %s WHERE id = %s"
    " RETURNING outcome, verdict, auto_retry_at, auto_retry_note, upstream_check_run_id"
)


def job_log_wanted(job: JobResult) -> bool:
    return (
        job.status == JobResult.Status.COMPLETED
        and job.conclusion in FAILED_CONCLUSIONS
        and levels.policy(job.backend.level).display_on_hud
    )


def job_log_after_report(*, job: JobResult) -> None:
    """Queue the classification of a job whose report just completed it as failed (callbacks' follow-up work)."""
    if job_log_wanted(job):
        transaction.on_commit(lambda: async_task("relay.tasks.job_log_classify", job.pk, save=False), robust=True)


def log_key(job: JobResult) -> str:
    return f"{LOG_PREFIX}/{archive.key_part(job.backend.repo)}/{job.pk}.log"


def rules_for(*, backend_id: int | None) -> list[Rule]:
    """The enabled rules that apply to a backend's logs: everyone's and its own, in the model's order. Written out:
    read for every failed job, and the ORM's compiling and its hundred model instances were an eighth of the worker's
    CPU for one (py-spy, tests/bench/bench_callback.py)."""
    with prepared_cursor() as cursor:
        cursor.execute(RULES, [backend_id])
        return [Rule(*row) for row in cursor.fetchall()]


def parsed_report_class(job: JobResult) -> str:
    """The class the job's parsed test report gives ("test" when it lists failed tests), "" when none is known.

    The hook for the per-test results (issue 14): until a parsed report is stored, no report decides.
    """
    return ""


def job_log_classify(*, job_id: int, job: JobResult | None = None, alerts_queued: bool = True) -> str:
    """Fetch (GitHub Actions) or find (uploaded) the job's log, classify it and store the verdict.

    ``job``: the row with its backend, just read by the caller (the completed callback's follow-up), not read again;
    its verdict fields are brought up to date (its ``failure`` too: read with it when the caller selected it).
    ``alerts_queued``: a PR job's alert rules are queued after the verdict
    (False: the caller evaluates them next)."""
    if job is None or job.pk != job_id:
        job = JobResult.objects.select_related("backend", "failure").filter(pk=job_id).first()
    if job is None or not job_log_wanted(job):
        return "not a failed job of an L2+ backend"
    previous = getattr(job, "failure", None)  # read with the job (select_related), else now
    found = JobFailure(job=job)
    if previous:  # an uploaded log, or one fetched before: classified again as it is
        found.log_key, found.log_sha256, found.log_bytes = previous.log_key, previous.log_sha256, previous.log_bytes
    if _github_run(job):
        try:
            _github_log_fetch(job, found)
        except github.GitHubError as e:
            if e.retryable:
                raise  # the task is retried by django-q2; nothing was stored
            found.problem = str(e)[:500]
    classification = _classified(found, job.backend_id) if found.log_key else None
    _verdict_store(job, found, classification, alerts_queued=alerts_queued)
    return f"{job.failure_class} ({found.source})"


def job_log_store(*, job: JobResult, stream: BinaryIO) -> JobFailure:
    """Keep an uploaded log (non-GitHub CI) and queue its classification; returns the row naming the stored log."""
    found = JobFailure.objects.filter(job=job).first() or JobFailure(job=job)
    counted = _Counted(stream, settings.JOB_LOG_MAX_BYTES)
    archive.reports_store().put(log_key(job), counted, content_type="text/plain")
    found.log_key, found.log_sha256, found.log_bytes = log_key(job), counted.sha256(), counted.size
    found.save()
    transaction.on_commit(lambda: async_task("relay.tasks.job_log_classify", job.pk), robust=True)
    return found


def job_logs_clean(*, now: datetime | None = None) -> int:
    """Delete raw logs older than JOB_LOG_RETENTION_DAYS from the store. Their verdicts stay; the rows stop naming
    the deleted bytes, so a re-classification fetches the log again (GitHub) or classifies without one (upload)."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.JOB_LOG_RETENTION_DAYS)
    old = archive.reports_store().expired_delete(LOG_PREFIX + "/", cutoff=cutoff)
    if old:
        JobFailure.objects.filter(log_key__in=old).update(log_key="")
    return len(old)


def _github_run(job: JobResult) -> bool:
    parts = urlsplit(job.run_url)
    return parts.netloc.lower() == "github.com" and job.run_id.isdigit()


def _github_log_fetch(job: JobResult, found: JobFailure) -> None:
    jobs = run_listing(  # one listing per run attempt for its failed jobs, as for artifacts
        key=f"relay:run-jobs:{job.backend.repo.lower()}:{job.run_id}:{job.run_attempt}",
        done=job.completed_at or job.updated_at,
        fetch=lambda: github.workflow_run_attempt_jobs(
            repo=job.backend.repo, run_id=job.run_id, attempt=job.run_attempt
        ),
    )
    gh_job = _job_named(jobs, job.job_name)
    if gh_job is None:
        found.problem = f"No job named {job.job_name!r} in run {job.run_id} attempt {job.run_attempt}."
        return
    found.github_job_id = gh_job["id"]
    runner = {"runner": gh_job.get("runner_name") or "", "runner_labels": gh_job.get("labels") or []}
    if runner := environment_trimmed(runner):  # where it ran, when the callback did not say
        environment_fill(job_id=job.pk, found=runner)
    failed = next((s for s in gh_job["steps"] if s["conclusion"] in ("failure", "timed_out")), None)
    if failed:
        found.failed_step, found.failed_step_number = failed["name"][:255], failed["number"]
        found.failed_step_started_at = parse_datetime(failed.get("started_at") or "")
        found.failed_step_completed_at = parse_datetime(failed.get("completed_at") or "")
    response = github.job_log_open(repo=job.backend.repo, job_id=gh_job["id"])
    try:
        response.raw.decode_content = True
        counted = _Counted(response.raw, settings.JOB_LOG_MAX_BYTES)
        archive.reports_store().put(log_key(job), counted, content_type="text/plain")
    finally:
        response.close()
    found.log_key, found.log_sha256, found.log_bytes = log_key(job), counted.sha256(), counted.size


def _job_named(jobs: list[dict], name: str) -> dict | None:
    """The attempt's job called ``name`` (any case); the only failed one when no name matches."""
    for candidate in (lambda j: j["name"] == name, lambda j: j["name"].lower() == name.lower()):
        matching = [j for j in jobs if candidate(j)]
        if matching:
            return matching[0]
    failed = [j for j in jobs if j["conclusion"] in FAILED_CONCLUSIONS]
    return failed[0] if len(failed) == 1 else None


def _classified(found: JobFailure, backend_id: int) -> Classification | None:
    try:
        with archive.reports_store().open(found.log_key) as stream:
            classification = log_classify(stream, rules_for(backend_id=backend_id), window=_failed_step(found))
    except (OSError, archive.ArchiveError) as e:
        found.problem = f"The log could not be read: {e}"[:500]
        return None
    if said := " ".join([classification.stopped, *(f"Rule {u}" for u in classification.unusable)]).strip():
        found.problem = said[:500]
    return classification


def _failed_step(found: JobFailure) -> StepWindow | None:
    """The failed step as the job API gave it, when it gave its number and times (else the log's own markers)."""
    if found.failed_step_number and found.failed_step_started_at and found.failed_step_completed_at:
        return StepWindow(found.failed_step_number, found.failed_step_started_at, found.failed_step_completed_at)
    return None


def _verdict_store(
    job: JobResult, found: JobFailure, classification: Classification | None, *, alerts_queued: bool
) -> None:
    match = classification.match if classification else None
    step_class = FailureClass.INFRA if found.failed_step and INFRA_STEPS.match(found.failed_step) else ""
    verdict = failure_verdict(
        relay_decided=job.relay_decided,
        step_class=step_class,
        rule_class=match.rule.failure_class if match else "",
        report_class=parsed_report_class(job),
        callback_test_failure=job.conclusion == "failure" and bool(job.failed or job.failed_tests),
    )
    found.failure_class, found.source = verdict.failure_class, verdict.source
    if match:
        found.rule_id = match.rule.id
        found.rule_name, found.rule_class = match.rule.name[:100], match.rule.failure_class
        found.line_number, found.line = match.line_number, match.line[:LINE_KEPT]
        found.groups, found.context = match.groups, [line[:LINE_KEPT] for line in match.context]
        found.signature = signature(match.line)
        found.step_number, found.step_line = match.step_number, match.step_line
    found.classified_at = timezone.now()
    with transaction.atomic():
        # One row per job, replaced whole: an upsert, one statement rather than a delete and an insert.
        found.pk = None
        JobFailure.objects.bulk_create([found], update_conflicts=True, unique_fields=["job"], update_fields=REPLACED)
        # updated_at is set so that replication copies the new outcome; what the job is now comes back with it.
        with prepared_cursor() as cursor:
            now = connection.ops.adapt_datetimefield_value(timezone.now())  # SQLite keeps naive UTC text
            cursor.execute(JOB_CLASSIFIED, [verdict.failure_class, now, job.pk])
            row = cursor.fetchone()
        if row is None:
            raise JobResult.DoesNotExist(f"job {job.pk} was deleted")
        job.failure_class = verdict.failure_class
        job.outcome, job.verdict, retry_at, job.auto_retry_note, job.upstream_check_run_id = row
        if retry_at is not None and timezone.is_naive(retry_at):  # SQLite's, read without the ORM's converters
            retry_at = timezone.make_aware(retry_at, UTC)
        job.auto_retry_at = retry_at
        job_results_changed()
        if found.line and job.upstream_check_run_id is not None:
            # Its L3/L4 check run shows the failure line (and may wait for this verdict): sync it again (by name:
            # check_runs does not import us).
            transaction.on_commit(lambda: async_task("relay.tasks.check_run_sync", job.pk, save=False), robust=True)
    job.failure = found
    found_verdict = baseline.job_verdict(job)
    if alerts_queued and job.event_type == "pull_request":  # the PR comment groups its failures by verdict
        transaction.on_commit(lambda: async_task("relay.tasks.job_alerts", job.pk, save=False), robust=True)
    if found_verdict and baseline.infra_retry_due(job, found_verdict):  # relay.reports.verdicts.job_infra_retry
        transaction.on_commit(lambda: async_task("relay.tasks.job_infra_retry", job.pk), robust=True)


class _Counted:
    """A read-only stream over ``stream`` that hashes and counts what passes and ends at ``limit`` bytes."""

    def __init__(self, stream: BinaryIO, limit: int) -> None:
        self.stream, self.limit, self.size, self._hash = stream, limit, 0, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        room = self.limit - self.size
        if room <= 0:
            return b""
        data = self.stream.read(min(size, room) if size and size > 0 else room)
        self.size += len(data)
        self._hash.update(data)
        return data

    def sha256(self) -> str:
        return self._hash.hexdigest()
