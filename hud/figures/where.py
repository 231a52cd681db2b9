"""Where jobs ran (``ootci.environment``): each shown job's environment, the backend page's runner and device filters,
the share of a backend's jobs that carry hardware information, and its sick runners (``ootci.runners``).

Environments are read from PostgreSQL by job id whichever store serves the matrix (as failure lines are): they are
shown and filtered on, never counted into the job-result figures the stores compute.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from django.db.models import Q

from hud.stores.types import Job, Matrix
from ootci import runners
from ootci.environment import HARDWARE_KEYS
from ootci.models import JobResult

HARDWARE_GOAL = 95.0  # percent of a backend's jobs carrying hardware information, once it sends any


@dataclass(frozen=True)
class HardwareShare:
    jobs: int
    with_hardware: int

    @property
    def percent(self) -> float | None:
        return round(100.0 * self.with_hardware / self.jobs, 1) if self.jobs else None

    @property
    def meets_goal(self) -> bool | None:
        """None until the backend sends any: the goal applies once it does."""
        if not self.with_hardware:
            return None
        return self.percent is not None and self.percent >= HARDWARE_GOAL


def environments(job_ids: list[int]) -> dict[int, dict]:
    """Each job's environment (jobs without one left out): one indexed query."""
    if not job_ids:
        return {}
    rows = JobResult.objects.filter(pk__in=job_ids).exclude(environment={}).values_list("pk", "environment")
    return dict(rows)


def hardware_share(*, backend_id: int, event: str, since: datetime) -> HardwareShare:
    """Of the backend's job attempts of ``event`` finished since ``since``, how many name their device or runner: two
    counts, each an index-only scan on PostgreSQL (migration ootci 0046), where one count with a filter read every
    attempt's environment."""
    hardware = Q()
    for key in HARDWARE_KEYS:
        hardware |= Q(environment__has_key=key)
    attempts = JobResult.objects.filter(backend_id=backend_id, event_type=event, finished_at__gte=since)
    return HardwareShare(jobs=attempts.count(), with_hardware=attempts.filter(hardware).count())


def environment_matches(env: dict | None, *, runner: str, device: str) -> bool:
    """A job ran on ``runner`` (its runner name or one of its labels) and ``device`` (any case); "" matches all."""
    env = env or {}
    if runner and runner != env.get("runner") and runner not in (env.get("runner_labels") or []):
        return False
    return not device or device.lower() == str(env.get("device") or "").lower()


def matrix_where(matrix: Matrix, envs: dict[int, dict], *, runner: str, device: str) -> Matrix:
    """The matrix with only the cells of jobs that ran on ``runner`` and ``device``; rows left empty go."""
    if not runner and not device:
        return matrix
    rows = []
    for row in matrix.rows:
        cells = {
            col: job
            for col, job in row.cells.items()
            if environment_matches(envs.get(job.id), runner=runner, device=device)
        }
        if cells:
            rows.append(replace(row, cells=cells, lost=0))
    columns = [c for c in matrix.columns if any(c in r.cells for r in rows)]
    return replace(matrix, rows=rows, columns=columns)


def sick_runners(backend_id: int, *, now: datetime | None = None) -> list[runners.SickRunner]:
    return runners.sick_runners([backend_id], now=now).get(backend_id, [])


def infra_candidate(job: Job, env: dict | None, *, now: datetime | None = None) -> runners.SickRunner | None:
    """For a failed job: the sick runner it failed on, if its runner is flagged now (a candidate for infra)."""
    if job.outcome not in ("test", "infra") or not env:
        return None
    return runners.infra_candidate(job.id, env, sick_runners(job.backend_id, now=now))
