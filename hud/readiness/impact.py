"""What the verdicts did for a backend (ootci.verdicts): check runs concluded neutral rather than failure
(exonerations, by verdict), and infra failures the relay re-ran by itself, with how many of those re-runs ended
green — shown on the readiness page beside the gates, gating nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count

from ootci.models import Exoneration, JobResult


@dataclass(frozen=True)
class Impact:
    days: int
    exonerated: int = 0
    by_verdict: dict[str, int] = field(default_factory=dict)
    retried: int = 0  # infra failures re-run automatically
    retried_green: int = 0  # of those, the re-run attempt succeeded
    not_retried: int = 0  # infra failures left alone (an outage, a later attempt, GitHub refused)

    @property
    def retried_green_rate(self) -> float | None:
        return round(100 * self.retried_green / self.retried, 1) if self.retried else None


def impact(backend_id: int, *, since: datetime, days: int) -> Impact:
    """Two queries (three when the relay re-ran something: whether the re-runs succeeded)."""
    exonerations = Exoneration.objects.filter(backend_id=backend_id, created_at__gte=since)
    by_verdict = dict(exonerations.values_list("verdict").annotate(n=Count("id")).values_list("verdict", "n"))
    noted = JobResult.objects.filter(backend_id=backend_id, created_at__gte=since).exclude(auto_retry_note="")
    rows = list(noted.values_list("auto_retry_at", "run_id", "run_attempt", "job_name"))
    retried = [(run, attempt, name) for at, run, attempt, name in rows if at is not None]
    green = 0
    if retried:
        later = JobResult.objects.filter(
            backend_id=backend_id, run_id__in={r for r, _, _ in retried}, conclusion="success"
        ).values_list("run_id", "run_attempt", "job_name")
        succeeded = set(later)
        green = sum((run, attempt + 1, name) in succeeded for run, attempt, name in retried)
    return Impact(
        days=days,
        exonerated=sum(by_verdict.values()),
        by_verdict=by_verdict,
        retried=len(retried),
        retried_green=green,
        not_retried=len(rows) - len(retried),
    )
