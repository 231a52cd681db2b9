"""The sweeper: jobs that never finished and dispatches never called back (the ``relay: sweep zombie jobs`` schedule).

A job in progress for longer than ZOMBIE_TIMEOUT_HOURS is concluded as ``timed_out``, decided by the relay, through
the one state machine (``ootci.jobs``): a completion arriving meanwhile wins, and a genuine completion arriving
later still replaces the relay's verdict. Its run attempt's successful jobs waited for it to list their reports
(``relay.reports.artifacts``): one job per run attempt is followed up for them, as for a run attempt whose last
job's follow-up was lost. Lost dispatches are only counted here (``Dispatch.objects.lost``); the HUD shows them.
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django_q.tasks import async_task

from ootci.jobs import Report, job_report_apply
from ootci.models import Dispatch, JobResult, lost_cutoff
from relay.github import check_runs
from relay.reports import artifacts

logger = logging.getLogger(__name__)

SWEEP_BATCH = 500
LOST_LOOKBACK = timedelta(days=1)


@dataclass(frozen=True)
class SweepResult:
    timed_out: list[int]  # ids of the jobs this sweep concluded as timed_out
    lost: int  # dispatches to L2+ backends never called back, sent in the day before the cut-off


def jobs_sweep(*, now: datetime | None = None) -> SweepResult:
    """Conclude the jobs in progress since before the cut-off as timed_out; count the dispatches lost before it."""
    now = now or timezone.now()
    cutoff = lost_cutoff(now)
    stale = Q(started_at__lt=cutoff) | Q(started_at__isnull=True, created_at__lt=cutoff)
    timed_out: list[int] = []
    runs: dict[tuple, int] = {}  # a timed-out job of each run attempt
    after = 0
    while True:
        batch = list(
            JobResult.objects.filter(stale, status=JobResult.Status.IN_PROGRESS, pk__gt=after).order_by("pk")[
                :SWEEP_BATCH
            ]
        )
        for job in batch:
            verdict = Report(
                status=JobResult.Status.COMPLETED,
                source=JobResult.Source.SWEEPER,
                level=job.level,
                at=now,
                fields={"conclusion": "timed_out"},
                relay_decided=True,
            )
            if job_report_apply(key=job.attempt_key, report=verdict).changed:
                timed_out.append(job.pk)
                runs.setdefault(tuple(v for k, v in job.attempt_key.items() if k != "job_name"), job.pk)
        if len(batch) < SWEEP_BATCH:
            break
        after = batch[-1].pk
    if timed_out:
        check_runs.check_runs_after_sweep(timed_out)
    # The run attempts a timed-out job ends, and those whose last job's follow-up was lost (relay.reports.artifacts).
    for job_id in {*runs.values(), *artifacts.runs_unlisted(now=now)}:
        transaction.on_commit(lambda pk=job_id: async_task("relay.tasks.run_reports_pull", pk), robust=True)
    lost = Dispatch.objects.lost(since=cutoff - LOST_LOOKBACK, now=now).count()
    if timed_out or lost:
        logger.warning(
            "sweep: %d jobs timed out, %d dispatches lost (sent the day before %s)", len(timed_out), lost, cutoff
        )
    return SweepResult(timed_out, lost)
