"""django-q2 tasks: each takes ids, calls one service, and is safe to run twice."""

import logging

from relay import services

logger = logging.getLogger(__name__)

# --- dispatch ----------------------------------------------------------------------------------


def delivery_dispatches_send(delivery_pk: int) -> dict[str, int]:
    return services.delivery_dispatches_send(delivery_pk=delivery_pk)


def dispatch_send(dispatch_id: int) -> str:
    return services.dispatch_send(dispatch_id=dispatch_id)


def dispatches_resend_stale() -> dict[str, int]:
    return services.dispatches_resend_stale()


def delivery_archive(delivery_pk: int, body: bytes) -> str:
    # The delivery and its dispatches are already committed; an archive failure is logged, never raised.
    try:
        return services.delivery_archive(delivery_pk=delivery_pk, body=body)
    except Exception:
        logger.exception("archiving delivery %s failed", delivery_pk)
        return ""


# --- callbacks ---------------------------------------------------------------------------------


def jobs_sweep() -> dict[str, int]:
    """Scheduled every 10 minutes (relay/migrations/0001_callbacks_sweeper_schedule.py)."""
    result = services.jobs_sweep()
    return {"timed_out": len(result.timed_out), "lost": result.lost}


# --- check runs and re-runs --------------------------------------------------------------------


def check_run_sync(job_id: int, attempt: int = 1) -> str:
    """Enqueued on commit by a callback, the label backfill and the sweeper; retries schedule it again."""
    return services.check_run_sync(job_id=job_id, attempt=attempt)


def pull_request_check_runs_backfill(pull_request_pk: int) -> int:
    return services.pull_request_check_runs_backfill(pull_request_pk=pull_request_pk)


def rerun_request(delivery_pk: int, attempt: int = 1, only: list[list] | None = None) -> dict[str, int]:
    return services.rerun_request_handle(delivery_pk=delivery_pk, attempt=attempt, only=only)
