"""What a callback that completed a job starts, run by the task worker (``relay.tasks.job_completed``)."""

import re

from django.db import transaction
from django_q.tasks import async_task

from ootci.models import BISECT_EVENT, JobResult
from relay.alerts import incidents
from relay.reports import logs

GITHUB_RUN_ID = re.compile(r"^[0-9]{1,20}$")


def job_completed_follow_up(*, job_id: int) -> str:
    """What a callback that completed a job starts, run by the task worker: the request queues this one task, not
    one per kind of work (each costs the request about a millisecond). Its test reports are pulled (a GitHub
    Actions run), a failed job's log is classified (both queued: they call GitHub), and the alert rules it bears on
    are evaluated here."""
    job = JobResult.objects.select_related("backend").filter(pk=job_id).first()
    if job is None:
        return "missing"
    job_reports_pull_wanted(job)
    logs.job_log_after_report(job=job)
    if job.event_type == BISECT_EVENT:  # a bisection step that ended without a report to come is inconclusive
        transaction.on_commit(lambda: async_task("relay.tasks.bisect_step_ended", job.pk), robust=True)
    return incidents.job_alerts_evaluate(job_id=job_id)


def job_reports_pull_wanted(job: JobResult) -> None:
    """After a new completed callback of a GitHub Actions job (numeric run id): queue the pull of its reports."""
    if job.status == JobResult.Status.COMPLETED and GITHUB_RUN_ID.match(job.run_id):
        transaction.on_commit(lambda: async_task("relay.tasks.job_reports_pull", job.pk), robust=True)
