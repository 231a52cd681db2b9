"""django-q2 tasks: each takes ids, calls one service, and is safe to run twice."""

import logging

from relay import alerts, check_runs, intake, notify, outbox, reruns, sweeper

logger = logging.getLogger(__name__)

# --- webhook intake and the dispatch outbox ----------------------------------------------------


def delivery_dispatches_send(delivery_pk: int) -> dict[str, int]:
    return outbox.delivery_dispatches_send(delivery_pk=delivery_pk)


def dispatch_send(dispatch_id: int) -> str:
    return outbox.dispatch_send(dispatch_id=dispatch_id)


def dispatches_send(dispatch_ids: list[int]) -> dict[str, int]:
    """The continuation of a fan-out that stopped at its task's deadline."""
    return outbox.dispatches_send(dispatch_ids=dispatch_ids)


def dispatches_resend_stale() -> dict[str, int]:
    """Scheduled every minute (relay/migrations/0001_dispatch_resend_schedule.py)."""
    return outbox.dispatches_resend_stale()


def deliveries_finish_pending() -> int:
    """Scheduled every minute (relay/migrations/0003_pending_deliveries_schedule.py)."""
    return intake.deliveries_finish_pending()


def delivery_archive(delivery_pk: int, body: bytes) -> str:
    # The delivery and its dispatches are already committed; an archive failure is logged, never raised.
    try:
        return outbox.delivery_archive(delivery_pk=delivery_pk, body=body)
    except Exception:
        logger.exception("archiving delivery %s failed", delivery_pk)
        return ""


# --- callbacks and the sweeper -----------------------------------------------------------------


def jobs_sweep() -> dict[str, int]:
    """Scheduled every 10 minutes (relay/migrations/0002_callbacks_sweeper_schedule.py)."""
    result = sweeper.jobs_sweep()
    return {"timed_out": len(result.timed_out), "lost": result.lost}


# --- check runs and re-runs --------------------------------------------------------------------


def check_run_sync(job_id: int, attempt: int = 1) -> str:
    """Enqueued on commit by a callback, the label backfill and the sweeper; retries schedule it again."""
    return check_runs.check_run_sync(job_id=job_id, attempt=attempt)


def pull_request_check_runs_backfill(delivery_pk: int) -> int:
    """The effect of a labeled delivery (relay.intake.EFFECT_TASKS)."""
    return check_runs.pull_request_check_runs_backfill(delivery_pk=delivery_pk)


def rerun_request(delivery_pk: int, attempt: int = 1, only: list[list] | None = None) -> dict[str, int]:
    """The effect of a re-run request (relay.intake.EFFECT_TASKS); retries schedule it again."""
    return reruns.rerun_request_handle(delivery_pk=delivery_pk, attempt=attempt, only=only)


# --- on-call alerts and notifications ----------------------------------------------------------


def alerts_evaluate(job_id: int) -> str:
    """Enqueued on commit by a callback that completed a job (relay.alerts.after_report)."""
    return alerts.job_alerts_evaluate(job_id=job_id)


def alerts_periodic() -> dict:
    """Scheduled every minute (relay/migrations/0004_alerts_schedule.py): relay health and readiness gates."""
    return alerts.periodic_evaluate()


def notification_send(notification_id: int, attempt: int = 1) -> str:
    """Enqueued on commit when an incident changes; retries schedule it again."""
    return notify.notification_send(notification_id=notification_id, attempt=attempt)
