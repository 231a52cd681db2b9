"""django-q2 tasks of the shared domain: each calls one service and is safe to run twice."""

from ootci import broker, governance


def readiness_review() -> dict[str, int]:
    """Scheduled every 10 minutes (ootci/migrations/0007_governance.py)."""
    return governance.readiness_review()


def deferred_tasks_requeue() -> int:
    """Scheduled every minute (ootci/migrations/0013_deferredtask.py): tasks Redis did not take, queued again."""
    return broker.deferred_requeue()
