"""Small builders for HUD tests: deliveries, dispatches and job results at times relative to now."""

import itertools
from datetime import timedelta

from django.utils import timezone

from ootci.models import Delivery, Dispatch, JobResult, PullRequest

_ids = itertools.count(1)


def ago(**delta):
    return timezone.now() - timedelta(**delta)


def pull_request(number: int, sha: str, **fields) -> PullRequest:
    fields.setdefault("title", f"PR {number}")
    fields.setdefault("author", "alice")
    return PullRequest.objects.create(upstream_repo="pytorch/pytorch", number=number, head_sha=sha, **fields)


def dispatch(backend, *, sha: str, at, pr: PullRequest | None = None, event: str = "pull_request", status="sent"):
    delivery = Delivery.objects.create(
        delivery_id=f"d-{next(_ids)}",
        event=event,
        upstream_repo="pytorch/pytorch",
        head_sha=sha,
        pull_request=pr,
        received_at=at,
        payload={},
    )
    return Dispatch.objects.create(delivery=delivery, backend=backend, status=status, created_at=at, sent_at=at)


def job(backend, *, name: str, conclusion: str = "success", finished=None, dispatch_=None, **fields) -> JobResult:
    """A completed job (or in_progress with conclusion=""), finished at ``finished`` (default 1 hour ago)."""
    finished = finished or ago(hours=1)
    status = "completed" if conclusion else "in_progress"
    delivery = dispatch_.delivery if dispatch_ else None
    fields.setdefault("started_at", finished - timedelta(minutes=30))
    fields.setdefault("created_at", fields["started_at"] or finished)
    fields.setdefault("event_type", delivery.event if delivery else "nightly")
    fields.setdefault("head_sha", delivery.head_sha if delivery else "f" * 40)
    fields.setdefault("pr_number", delivery.pull_request.number if delivery and delivery.pull_request else None)
    fields.setdefault("run_id", str(next(_ids)))
    return JobResult.objects.create(
        backend=backend,
        dispatch=dispatch_,
        delivery_id=delivery.delivery_id if delivery else fields["head_sha"],
        upstream_repo="pytorch/pytorch",
        workflow_name=fields.pop("workflow_name", "ci"),
        job_name=name,
        status=status,
        conclusion=conclusion,
        completed_at=finished if conclusion else None,
        level=backend.level,
        **fields,
    )
