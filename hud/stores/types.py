"""The HUD's figures as plain data (no model instances): what the stores, page assembly, pages and API share."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ootci.gates import Readiness

# The upstream events the HUD counts, the default first.
EVENTS = ("pull_request", "push", "nightly", "periodic")


def rate(part: int, whole: int) -> float | None:
    """``part`` in percent of ``whole``, one decimal; None (shown as "no data", never 0 %) when ``whole`` is 0."""
    return round(100.0 * part / whole, 1) if whole else None


@dataclass(frozen=True)
class BackendInfo:
    id: int
    repo: str
    level: str
    device: str
    oncalls: tuple[str, ...]
    events: tuple[str, ...]
    enabled: bool
    probe: bool = False  # the relay's own probe: its health cards, not a row of the backends' figures

    @property
    def org(self) -> str:
        return self.repo.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.repo.split("/", 1)[1]


@dataclass(frozen=True)
class Counts:
    """Latest-attempt outcomes in a window; ``lost`` dispatches are already inside ``infra_failures``."""

    successes: int = 0
    test_failures: int = 0
    infra_failures: int = 0
    lost: int = 0
    running: int = 0
    skipped: int = 0
    timed_out: int = 0

    @property
    def total(self) -> int:
        return self.successes + self.test_failures + self.infra_failures

    @property
    def pass_rate(self) -> float | None:
        return rate(self.successes, self.total)

    @property
    def timeout_rate(self) -> float | None:
        return rate(self.timed_out, self.total)


@dataclass(frozen=True)
class BackendStats:
    """One backend's figures over a window (``counts`` include its lost dispatches)."""

    counts: Counts = field(default_factory=Counts)
    prs: int = 0
    queue_median: float | None = None
    queue_p90: float | None = None
    queue_avg: float | None = None
    duration_median: float | None = None
    duration_avg: float | None = None
    last_run: datetime | None = None


@dataclass(frozen=True)
class DayRate:
    day: date
    successes: int
    total: int

    @property
    def pass_rate(self) -> float | None:
        return rate(self.successes, self.total)


@dataclass(frozen=True)
class Summary:
    """The job-result figures of the overview, which a store computes from one latest-attempt selection."""

    stats: dict[int, BackendStats]  # the window and event asked for
    daily: dict[int, list[DayRate]]  # the sparkline window (days with runs only, as pages.daily)


@dataclass(frozen=True)
class RelayHealth:
    deliveries: int
    dispatches_sent: int
    dispatches_failed: int
    dispatches_pending: int
    dispatches_lost: int
    callback_rejections: int
    dispatches_waiting: int = 0  # pending, waiting out a GitHub outage or rate limit (``retry_at`` set)
    journal_waiting: int = 0  # requests journaled while the database was down, not yet replayed
    journal_dead: int = 0  # journal entries refused for good (forged, corrupt, too old)


@dataclass(frozen=True)
class HealthRow:
    backend: BackendInfo
    stats: BackendStats
    spark: list[DayRate]
    readiness: Readiness


@dataclass(frozen=True)
class Overview:
    days: int
    event: str
    sections: dict[str, list[HealthRow]]  # L4, L3, L2, worst first
    listed: list[BackendInfo]  # L1: listed only
    relay: RelayHealth
    probes: list[ProbeCard] = field(default_factory=list)  # the relay's probes, two cards each


@dataclass(frozen=True)
class ProbeSample:
    """One sample of a probe's card: a pull request (its head SHA) or a nightly SHA, with its jobs' latest attempts."""

    pr_number: int | None
    sha: str
    at: datetime
    jobs: int  # latest attempts with a result (running ones included)
    unexpected: tuple[str, ...] = ()  # "workflow / job (conclusion)" of each unexpected outcome
    missing: str = ""  # why no result counts where one was due ("dispatched 3 h ago, no result within 2 h")

    @property
    def ok(self) -> bool:
        return not self.unexpected and not self.missing


@dataclass(frozen=True)
class ProbeCard:
    """A relay-health card: Healthy when every sample had its expected outcomes and none was late, else Degraded."""

    probe: BackendInfo
    kind: str  # "pull_request" | "nightly"
    title: str
    state: str  # "Healthy" | "Degraded"
    reason: str
    samples: list[ProbeSample]


@dataclass(frozen=True)
class Job:
    """One job attempt as the pages show it."""

    id: int
    backend_id: int
    event_type: str
    pr_number: int | None
    head_sha: str
    delivery_id: str
    workflow_name: str
    job_name: str
    run_id: str
    run_attempt: int
    check_run_id: str
    status: str
    conclusion: str
    outcome: str  # success | test | infra | running | skipped
    started_at: datetime | None
    completed_at: datetime | None
    created_at: datetime
    finished_at: datetime
    queue_time: float | None  # the workflow run's, on the job that opened it
    execution_time: float | None
    passed: int | None
    failed: int | None
    skipped: int | None
    failed_tests: tuple[str, ...]
    run_url: str
    artifact_url: str
    level: str
    upstream_check_run_id: int | None
    one_shot: bool
    relay_decided: bool
    source: str
    upstream_repo: str
    dependency_wait: float | None = None  # waiting for dependencies (a later job of its run)
    sha_check: str = ""  # a self-report's upstream SHA, as GitHub answered (JobResult.ShaCheck)

    @property
    def column(self) -> str:
        return f"{self.workflow_name} / {self.job_name}"

    @property
    def job_url(self) -> str:
        """The downstream job log when we know it, else the run."""
        if self.run_url and self.check_run_id.isdigit():
            return f"{self.run_url.rstrip('/')}/job/{self.check_run_id}"
        return self.run_url


@dataclass(frozen=True)
class MatrixRow:
    pr_number: int | None
    sha: str
    title: str
    author: str
    at: datetime
    lost: int  # dispatches of this SHA that never called back
    cells: dict[str, Job]  # column → latest attempt


@dataclass(frozen=True)
class Matrix:
    columns: list[str]
    rows: list[MatrixRow]
    page: int
    has_next: bool


@dataclass(frozen=True)
class Waiting:
    """A dispatch of the PR's head SHA with no report yet: waiting, lost or failed to send."""

    state: str  # waiting | lost | failed
    since: datetime


@dataclass(frozen=True)
class PrGroup:
    backend: BackendInfo
    jobs: list[Job]  # latest attempts on the head SHA, failures first
    earlier: list[Job]  # older attempts and earlier SHAs, newest first
    waiting: Waiting | None


@dataclass(frozen=True)
class PrDetail:
    number: int
    upstream_repo: str
    title: str
    author: str
    labels: tuple[str, ...]
    state: str
    head_sha: str
    html_url: str
    groups: list[PrGroup]

    @property
    def summary(self) -> dict[str, int]:
        jobs = [j for g in self.groups for j in g.jobs]
        return {
            "jobs": len(jobs),
            "passed": sum(j.outcome == "success" for j in jobs),
            "failed": sum(j.outcome in ("test", "infra") for j in jobs),
            "running": sum(j.outcome == "running" for j in jobs),
            "skipped": sum(j.outcome == "skipped" for j in jobs),
            "waiting": sum(g.waiting is not None and g.waiting.state == "waiting" for g in self.groups),
            "lost": sum(g.waiting is not None and g.waiting.state != "waiting" for g in self.groups),
        }


@dataclass(frozen=True)
class JobDetail:
    job: Job
    attempts: list[Job]  # every attempt of this job, newest first
    pr_title: str


@dataclass(frozen=True)
class MetricsSeries:
    backend: BackendInfo
    days: list[DayRate]  # every day of the window, oldest first; total 0 means no runs (a gap)
