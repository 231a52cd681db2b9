"""What a callback that completed a job starts, run by the task worker (``relay.tasks.job_completed``)."""

import logging
import re

from django.db import transaction
from django_q.tasks import async_task

from ootci.models import BISECT_EVENT, JobResult
from relay.alerts import incidents
from relay.github import client as github
from relay.reports import logs
from relay.reports.artifacts import job_artifacts_to_pull

logger = logging.getLogger(__name__)

GITHUB_RUN_ID = re.compile(r"^[0-9]{1,20}$")


def job_completed_follow_up(*, job_id: int) -> str:
    """What a callback that completed a job starts, run by the task worker: the request queues this one task, not
    one per kind of work (each costs the request about a millisecond). Its test reports are pulled (a GitHub
    Actions run with an artifact for it), a failed job's log is classified (both queued: they call GitHub), and the
    alert rules it bears on are evaluated here."""
    job = JobResult.objects.select_related("backend").filter(pk=job_id).first()
    if job is None:
        return "missing"
    job_reports_pull_wanted(job)
    logs.job_log_after_report(job=job)
    if job.event_type == BISECT_EVENT:  # a bisection step that ended without a report to come is inconclusive
        transaction.on_commit(lambda: async_task("relay.tasks.bisect_step_ended", job.pk), robust=True)
    return incidents.job_alerts_evaluate(job_id=job_id, job=job)


def job_reports_pull_wanted(job: JobResult) -> None:
    """After a new completed callback of a GitHub Actions job (numeric run id): queue the pull of its reports when
    its run has an artifact of it not pulled yet (the run's listing is shared by its jobs,
    ``relay.reports.artifacts``); when GitHub cannot say, the pull task asks again and retries."""
    if job.status != JobResult.Status.COMPLETED or not GITHUB_RUN_ID.match(job.run_id):
        return
    try:
        if not job_artifacts_to_pull(job):
            return
    except github.GitHubError as e:
        logger.info("job %s: run artifacts not listed (%s): the pull task tries again", job.pk, e)
    # Not kept in django-q2's results when it succeeds (save=False): at one per completed job, pruning that table
    # (a locking read of up to Q_CLUSTER["save_limit"] rows per task) cost more than the pull's own statements.
    transaction.on_commit(lambda: async_task("relay.tasks.job_reports_pull", job.pk, save=False), robust=True)
