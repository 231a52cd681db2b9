"""Sick runners: a runner (or runner label, ``ootci.environment.runner_keys``) whose failure rate over the last 24 h is
significantly above its backend's — the Wilson lower bound of its rate above the backend's rate, over at least
MIN_JOBS jobs. Flagged on the backend page, opened as a ``sick_runner`` incident (``relay.alerts.incidents``), and
named as evidence on its failed jobs: candidates for the ``infra`` verdict ("3 of 4 failures on runner npu-07; works
elsewhere"), never given it by this rule alone.

Counted over completed job attempts (a runner runs attempts; a re-run elsewhere is what "works elsewhere" means):
failures are test and infra failures, successes count, skipped and running jobs do not.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from ootci.environment import runner_keys
from ootci.models import JobResult

WINDOW = timedelta(hours=24)
MIN_JOBS = 10
# One-sided 99.95 %: evaluated after every job of every runner for a month, a healthy fleet is never flagged
# (tests/bench/bench_runners.py), while a runner failing at 3× its backend's rate is within a day.
Z = 3.29
FAILED = (JobResult.Outcome.TEST, JobResult.Outcome.INFRA)
COUNTED = (JobResult.Outcome.SUCCESS, *FAILED)


def wilson_lower(failures: int, n: int, z: float = Z) -> float:
    """The Wilson score interval's lower bound of the rate ``failures / n``."""
    if n == 0:
        return 0.0
    p = failures / n
    centre = p + z * z / (2 * n)
    margin = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - margin) / (1 + z * z / n))


@dataclass(frozen=True)
class SickRunner:
    key: str  # runner:<name> or label:<label>
    jobs: int
    failures: int
    lower: float  # Wilson lower bound of its failure rate
    backend_rate: float
    backend_failures: int
    elsewhere_jobs: int
    elsewhere_failures: int
    failed_job_ids: tuple[int, ...] = field(default=())

    @property
    def kind(self) -> str:
        return self.key.partition(":")[0]

    @property
    def name(self) -> str:
        return self.key.partition(":")[2]

    @property
    def rate(self) -> float:
        return self.failures / self.jobs

    @property
    def elsewhere_rate(self) -> float | None:
        return self.elsewhere_failures / self.elsewhere_jobs if self.elsewhere_jobs else None

    @property
    def text(self) -> str:
        where = "runner" if self.kind == "runner" else "runner label"
        elsewhere = self.elsewhere_rate
        if elsewhere is None:
            tail = "no other runner ran its jobs"
        elif elsewhere <= self.backend_rate:
            tail = f"works elsewhere ({self.elsewhere_failures} of {self.elsewhere_jobs} failed)"
        else:
            tail = f"{self.elsewhere_failures} of {self.elsewhere_jobs} failed elsewhere"
        return (
            f"{self.failures} of {self.backend_failures} failures on {where} {self.name} "
            f"({self.failures} of its {self.jobs} jobs in 24 h, {100 * self.rate:.0f} % against "
            f"{100 * self.backend_rate:.0f} % for the backend); {tail}"
        )

    def evidence(self) -> dict:
        return {
            "runner": self.key,
            "jobs": self.jobs,
            "failures": self.failures,
            "rate": round(self.rate, 4),
            "lower_bound": round(self.lower, 4),
            "backend_rate": round(self.backend_rate, 4),
            "elsewhere_jobs": self.elsewhere_jobs,
            "elsewhere_failures": self.elsewhere_failures,
            "text": self.text,
        }


def sick_runners_of(rows: list[tuple[int, str, dict]]) -> list[SickRunner]:
    """The sick runners among one backend's job attempts ``rows`` as (id, outcome, environment)."""
    counted = [(job_id, outcome in FAILED, env) for job_id, outcome, env in rows if outcome in COUNTED]
    n, failures = len(counted), sum(failed for _, failed, _ in counted)
    if n == 0 or failures == 0:
        return []
    backend_rate = failures / n
    jobs: dict[str, list[tuple[int, bool]]] = defaultdict(list)
    for job_id, failed, env in counted:
        for key in runner_keys(env):
            jobs[key].append((job_id, failed))
    found = []
    for key, mine in jobs.items():
        mine_failed = sum(failed for _, failed in mine)
        if len(mine) < MIN_JOBS or mine_failed == 0:
            continue
        lower = wilson_lower(mine_failed, len(mine))
        if lower <= backend_rate:
            continue
        found.append(
            SickRunner(
                key=key,
                jobs=len(mine),
                failures=mine_failed,
                lower=lower,
                backend_rate=backend_rate,
                backend_failures=failures,
                elsewhere_jobs=n - len(mine),
                elsewhere_failures=failures - mine_failed,
                failed_job_ids=tuple(job_id for job_id, failed in mine if failed),
            )
        )
    return sorted(found, key=lambda s: (-s.lower, s.key))


def sick_runners(backend_ids: list[int], *, now: datetime | None = None) -> dict[int, list[SickRunner]]:
    """Per backend, its sick runners over the 24 h before ``now``: one query for any number of backends."""
    now = now or timezone.now()
    recent = JobResult.objects.filter(
        backend_id__in=backend_ids,
        status=JobResult.Status.COMPLETED,
        finished_at__gt=now - WINDOW,
        finished_at__lte=now,
    )
    rows: dict[int, list[tuple[int, str, dict]]] = defaultdict(list)
    for backend_id, job_id, outcome, env in recent.values_list("backend_id", "id", "outcome", "environment"):
        rows[backend_id].append((job_id, outcome, env))
    return {backend_id: found for backend_id in backend_ids if (found := sick_runners_of(rows.get(backend_id, [])))}


def infra_candidate(job_id: int, environment: dict | None, sick: list[SickRunner]) -> SickRunner | None:
    """The sick runner a failed job ran on, if any: its failure is a candidate for the infra verdict."""
    keys = set(runner_keys(environment))
    return next((s for s in sick if s.key in keys and job_id in s.failed_job_ids), None)
