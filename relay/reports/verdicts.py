"""The automatic re-run of infra failures: an L3/L4 pull-request job whose verdict (``ootci.baseline``) is infra is
re-run once, through the re-run path of the check runs' "Re-run" button (``rerun-failed-jobs`` as the App)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.utils import timezone

from ootci import baseline, verdicts
from ootci.models import JobResult
from relay.github import client as github

logger = logging.getLogger(__name__)

FAILED = (JobResult.Outcome.TEST, JobResult.Outcome.INFRA)


def job_infra_retry(*, job_id: int) -> str:
    """Re-run the failed jobs of an infra-failed job's downstream run (``rerun-failed-jobs`` as the App), once per
    job attempt; not when more than AUTO_RETRY_OUTAGE_JOBS jobs of the same upstream event failed (an outage, said on
    the job), never a job whose verdict is not infra. Claimed by a conditional UPDATE: two tasks never re-run twice."""
    job = JobResult.objects.select_related("backend").filter(pk=job_id).first()
    if job is None or job.verdict != verdicts.INFRA:
        return "not infra"
    if not JobResult.objects.filter(pk=job_id, auto_retry_note="").update(auto_retry_note="re-run requested"):
        return "done"
    if _superseded(job):
        return _retry_noted(job, "a later attempt exists: not re-run")
    latest = baseline.latest_attempts(JobResult.objects.filter(delivery_id=job.delivery_id))
    failed = sum(j.outcome in FAILED for j in latest)
    if failed > settings.AUTO_RETRY_OUTAGE_JOBS:
        return _retry_noted(job, f"not re-run: {failed} jobs of this event failed (an outage?)")
    try:
        started = github.workflow_run_rerun_failed_jobs(repo=job.backend.repo, run_id=int(job.run_id))
    except github.GitHubError as e:
        logger.warning("automatic re-run of %s run %s failed: %s", job.backend.repo, job.run_id, e)
        return _retry_noted(job, f"re-run failed: {e}"[:200])
    JobResult.objects.filter(pk=job_id).update(
        auto_retry_at=timezone.now(), auto_retry_note="re-run automatically" if started else "already running"
    )
    logger.info("automatic re-run of %s run %s (job %s, infra)", job.backend.repo, job.run_id, job_id)
    return "rerun" if started else "already running"


def _retry_noted(job: JobResult, note: str) -> str:
    JobResult.objects.filter(pk=job.pk).update(auto_retry_note=note)
    return note


def _superseded(job: JobResult) -> bool:
    return job.attempts().values_list("pk", flat=True).first() != job.pk
