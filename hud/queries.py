"""Every figure the HUD shows, behind one interface (pages and the JSON API call only this module).

How we count (the pages repeat this in their "how we count" note):

- **A job** is one (backend, event, tested SHA, workflow, job name). Its **result is its latest attempt**:
  the newest report (created time, then run attempt, then id), so a failed job that passed on re-run
  counts once, as a success.
- **Windows** select jobs by their finish time: completion, else start, else report time (a job whose
  in_progress callback was lost still shows, at its completion time). Windows are rolling: the last
  ``days`` × 24 hours.
- **Outcomes** of latest attempts: *success*; *test failure* = ``failure`` with failed tests reported;
  *infrastructure failure* = ``failure`` without failed tests, ``cancelled``, ``timed_out`` or any
  other conclusion, plus every **lost dispatch** (sent or pending longer than ``ZOMBIE_TIMEOUT_HOURS``
  with no callback at all) of an L2+ backend; *running* = not completed yet; *skipped* (``skipped``,
  ``neutral``) is shown but not counted.
- **Total** = successes + test failures + infrastructure failures. **Pass rate** = successes ÷ total, in
  percent with one decimal; ``None`` (shown as "no data", never 0 %) when the total is 0.
- Times are seconds (floats rounded to 0.1). Medians and p90 are continuous percentiles
  (``percentile_cont``) over latest attempts that have the value.

The store underneath is picked by :func:`store`: the Django database (``hud.store_db``), or with
``CLICKHOUSE_URL`` set the ClickHouse store (``hud.store_clickhouse``), which implements the same
:class:`Store` methods with the same signatures, rounding and ordering, so both give identical results on
the same data (tests/hud/test_clickhouse_parity.py). When a ClickHouse read fails, the database answers
and the page says so (:func:`fallback_reason`, shown by ``base.html``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from time import monotonic
from time import time as wall_time
from typing import Any, Protocol

from django.conf import settings
from django.utils import timezone

from hud import clickhouse, softcache

logger = logging.getLogger(__name__)

EVENTS = ("pull_request", "push", "nightly", "periodic")
LEVELS_SHOWN = ("L4", "L3", "L2")
PER_PAGE = 50
SPARK_DAYS = 14


# --- result types (plain data; no model instances) ----------------------------------------------


@dataclass(frozen=True)
class BackendInfo:
    id: int
    repo: str
    level: str
    device: str
    oncalls: tuple[str, ...]
    events: tuple[str, ...]
    enabled: bool

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
class Eligibility:
    """A backend against the RFC-0050 L3 bar, over the last 7 days of pull_request jobs."""

    success_rate: float | None
    queue_p90: float | None
    pr_run_p90: float | None
    meets_success: bool
    meets_queue: bool
    meets_run_time: bool
    verdict: str  # "meets-l3" | "below-level" | "not-yet" | "no-data"

    @property
    def meets_l3(self) -> bool:
        return self.meets_success and self.meets_queue and self.meets_run_time


@dataclass(frozen=True)
class Summary:
    """The job-result figures of the overview, which a store computes from one latest-attempt selection."""

    stats: dict[int, BackendStats]  # the window and event asked for
    daily: dict[int, list[DayRate]]  # the sparkline window (days with runs only, as Store.daily)
    weekly: dict[int, BackendStats]  # pull_request, the last 7 days: the L3 bar
    pr_run_p90: dict[int, float]  # pull_request, the last 7 days


@dataclass(frozen=True)
class RelayHealth:
    deliveries: int
    dispatches_sent: int
    dispatches_failed: int
    dispatches_pending: int
    dispatches_lost: int
    callback_rejections: int


@dataclass(frozen=True)
class HealthRow:
    backend: BackendInfo
    stats: BackendStats
    spark: list[DayRate]
    eligibility: Eligibility


@dataclass(frozen=True)
class Overview:
    days: int
    event: str
    sections: dict[str, list[HealthRow]]  # L4, L3, L2, worst first
    listed: list[BackendInfo]  # L1: listed only
    relay: RelayHealth


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
    queue_time: float | None
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


# --- the store interface -------------------------------------------------------------------------


class Store(Protocol):
    def backends(self) -> list[BackendInfo]: ...
    def backend_stats(
        self, *, since: datetime, event: str, backend_id: int | None = None
    ) -> dict[int, BackendStats]: ...
    def daily(self, *, since: datetime, event: str, backend_id: int | None = None) -> dict[int, list[DayRate]]: ...
    def pr_run_p90(self, *, since: datetime) -> dict[int, float]: ...
    def summary(
        self, *, event: str, since: datetime, spark_since: datetime | None, week_since: datetime
    ) -> Summary: ...
    def relay_health(self, *, since: datetime) -> RelayHealth: ...
    def matrix(
        self, *, backend_id: int, since: datetime, event: str, failing_only: bool, page: int
    ) -> tuple[list[MatrixRow], bool]: ...
    def pr_detail(self, *, number: int, backends: list[BackendInfo]) -> PrDetail | None: ...
    def job_detail(self, *, backend_id: int, job_id: int) -> JobDetail | None: ...


def store() -> Store:
    """The store every query reads: ClickHouse when configured (falling back to the database), else the database."""
    from hud.store_db import DatabaseStore

    if source() != "clickhouse":
        return DatabaseStore()
    from hud.store_clickhouse import ClickHouseStore

    return FallbackStore(ClickHouseStore(), DatabaseStore())


# --- ClickHouse outages: the database answers, the page says so ----------------------------------

# After a failed ClickHouse read, this process reads the database for this long before trying ClickHouse again,
# so that an outage costs one failed attempt (perhaps a connect timeout) per interval, not one per figure.
RETRY_CLICKHOUSE_SECONDS = 30.0
_outage = {"until": 0.0, "reason": ""}
_fallback: ContextVar[str] = ContextVar("hud_fallback", default="")


def source() -> str:
    """Which store answers now: "clickhouse" (configured, not failing) or "database"."""
    if not clickhouse.is_configured():
        return "database"
    if monotonic() < _outage["until"]:
        _fallback.set(_outage["reason"])
        return "database"
    return "clickhouse"


def fallback_reason() -> str:
    """Why this request's figures came from the database instead of ClickHouse ("" when they did not)."""
    return _fallback.get()


@contextmanager
def unit_of_work() -> Iterator[None]:
    """One page or API request: one ClickHouse client at most (opened on the first read) and its own fallback note."""
    token = _fallback.set("")
    try:
        with clickhouse.session():
            yield
    finally:
        _fallback.reset(token)


class FallbackStore:
    """The ClickHouse store; any read it fails is answered by the database store, which then answers every read for
    RETRY_CLICKHOUSE_SECONDS (see ``source``). Either way the request is told (``fallback_reason``)."""

    def __init__(self, primary: Store, fallback: Store) -> None:
        self.primary, self.fallback = primary, fallback

    def _read(self, method: str, **kwargs):
        try:
            return getattr(self.primary, method)(**kwargs)
        except clickhouse.ClickHouseError as ex:
            reason = " ".join(str(ex).split())[:300]
            logger.warning("HUD read %s from the database: %s", method, reason)
            _outage.update(until=monotonic() + RETRY_CLICKHOUSE_SECONDS, reason=reason)
            _fallback.set(reason)
            return getattr(self.fallback, method)(**kwargs)

    def backends(self) -> list[BackendInfo]:
        return self._read("backends")

    def backend_stats(self, *, since: datetime, event: str, backend_id: int | None = None) -> dict[int, BackendStats]:
        return self._read("backend_stats", since=since, event=event, backend_id=backend_id)

    def daily(self, *, since: datetime, event: str, backend_id: int | None = None) -> dict[int, list[DayRate]]:
        return self._read("daily", since=since, event=event, backend_id=backend_id)

    def pr_run_p90(self, *, since: datetime) -> dict[int, float]:
        return self._read("pr_run_p90", since=since)

    def summary(self, *, event: str, since: datetime, spark_since: datetime | None, week_since: datetime) -> Summary:
        return self._read("summary", event=event, since=since, spark_since=spark_since, week_since=week_since)

    def relay_health(self, *, since: datetime) -> RelayHealth:
        return self._read("relay_health", since=since)

    def matrix(
        self, *, backend_id: int, since: datetime, event: str, failing_only: bool, page: int
    ) -> tuple[list[MatrixRow], bool]:
        kwargs = {"backend_id": backend_id, "since": since, "event": event, "failing_only": failing_only, "page": page}
        return self._read("matrix", **kwargs)

    def pr_detail(self, *, number: int, backends: list[BackendInfo]) -> PrDetail | None:
        return self._read("pr_detail", number=number, backends=backends)

    def job_detail(self, *, backend_id: int, job_id: int) -> JobDetail | None:
        return self._read("job_detail", backend_id=backend_id, job_id=job_id)


# --- helpers shared by every store -----------------------------------------------------------------


def rate(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


# Every cached figure: its name → the store call that computes it from its cache key (and ``now``).
FIGURES: dict[str, Callable[..., Any]] = {
    "stats": lambda days, event, backend_id, now=None: store().backend_stats(
        since=since(days, now), event=event, backend_id=backend_id
    ),
    "daily": lambda start, event, backend_id, now=None: store().daily(since=start, event=event, backend_id=backend_id),
    "pr-run-p90": lambda now=None: store().pr_run_p90(since=since(7, now)),
    "relay": lambda days, now=None: store().relay_health(since=since(days, now)),
    "summary": lambda days, event, spark_since, now=None: summary_compute(days, event, spark_since, now_or(now)),
}
_refreshing: ContextVar[bool] = ContextVar("hud_refreshing", default=False)  # in figures_refresh: skip cache reads


def summary_compute(days: int, event: str, spark_since: datetime | None, now: datetime) -> Summary:
    """``Store.summary`` at one ``now``: with days=7 the window and the L3 bar's week are then one window."""
    return store().summary(event=event, since=since(days, now), spark_since=spark_since, week_since=since(7, now))


def cached(name: str, *key, now: datetime | None = None):
    """``FIGURES[name](*key)`` from the cache if it was computed less than HUD_CACHE_SECONDS ago, else computed here
    and cached. The figures the pages show by default are recomputed every minute by :func:`figures_refresh`, so
    their requests find them cached; a request itself never enqueues work. Calls with an explicit ``now`` (tests,
    parity checks) always compute."""
    seconds = settings.HUD_CACHE_SECONDS
    if now is not None or not seconds:
        return FIGURES[name](*key, now=now)
    answering = source()  # each store's figures under their own keys
    entry = None if _refreshing.get() else softcache.get(figure_key(answering, name, key))
    if entry is not None and wall_time() - entry[0] < seconds:
        return entry[1]
    return figure_compute(name, key, answering)


def figure_key(answering: str, name: str, key: tuple) -> str:
    parts = (part.isoformat() if isinstance(part, datetime) else str(part) for part in key)
    return ":".join(["hud", answering, name, *parts])  # no spaces: memcached-safe


def figure_compute(name: str, key: tuple, answering: str):
    """Compute a figure and cache it, unless ClickHouse failed during the computation and the database answered."""
    value = FIGURES[name](*key)
    if source() == answering:
        softcache.set(figure_key(answering, name, key), (wall_time(), value), settings.HUD_CACHE_SECONDS)
    return value


def figures_refresh(*, days: tuple[int, ...], metric_days: tuple[int, ...]) -> None:
    """Recompute and cache what the overview (page and API) shows for each of ``days`` and the metrics page for each
    of ``metric_days``, for the default event: the task ``hud.tasks.figures_refresh``, scheduled every minute. It
    draws those pages' figures through ``cached`` with the cache read skipped, so it fills exactly their keys."""
    if not settings.HUD_CACHE_SECONDS:
        return
    token = _refreshing.set(True)
    try:
        with unit_of_work():
            for window in days:
                overview(days=window, event=EVENTS[0])
            for window in metric_days:
                metrics(days=window, event=EVENTS[0])
    finally:
        _refreshing.reset(token)


def now_or(now: datetime | None) -> datetime:
    return now or timezone.now()


def since(days: int, now: datetime | None = None) -> datetime:
    return now_or(now) - timedelta(days=days)


def zombie_before(now: datetime | None = None) -> datetime:
    """Dispatches created before this and never called back are lost."""
    return now_or(now) - timedelta(hours=settings.ZOMBIE_TIMEOUT_HOURS)


# --- the public functions ------------------------------------------------------------------------


def backends() -> list[BackendInfo]:
    """Enabled allowlisted backends, by repo name."""
    return store().backends()


def backend(repo: str) -> BackendInfo | None:
    """The enabled backend named ``repo`` (ignoring case), or None."""
    repo = repo.lower()
    return next((b for b in backends() if b.repo.lower() == repo), None)


def backend_stats(
    *, days: int, event: str, backend_id: int | None = None, now: datetime | None = None
) -> dict[int, BackendStats]:
    """Figures per backend id over the last ``days`` for ``event`` (see the module docstring)."""
    return cached("stats", days, event, backend_id, now=now)


def day_span(days: int, now: datetime | None = None) -> list[date]:
    """The last ``days`` whole UTC days, today included, oldest first."""
    today = now_or(now).astimezone(UTC).date()
    return [today - timedelta(days=days - 1 - i) for i in range(days)]


def daily_pass_rates(
    *, days: int, event: str, backend_id: int | None = None, now: datetime | None = None
) -> dict[int, list[DayRate]]:
    """Per backend id: one DayRate per UTC calendar day, the last ``days`` days (today included), oldest first.

    Days are whole UTC days (no partial first day); a day without runs has total 0 and no pass rate.
    Only backends with at least one counted job or lost dispatch in the span are keys.
    """
    start = day_start(days, now)
    found = cached("daily", start, event, backend_id, now=now)
    return every_day(found, days, now)


def day_start(days: int, now: datetime | None = None) -> datetime:
    """The start of the first of the last ``days`` whole UTC days."""
    return datetime.combine(day_span(days, now)[0], time.min, tzinfo=UTC)


def every_day(found: dict[int, list[DayRate]], days: int, now: datetime | None = None) -> dict[int, list[DayRate]]:
    """``Store.daily`` figures with the days without runs filled in (see daily_pass_rates)."""
    span = day_span(days, now)
    result = {}
    for backend_id, points in found.items():
        by_day = {p.day: p for p in points}
        result[backend_id] = [by_day.get(d, DayRate(d, 0, 0)) for d in span]
    return result


def empty_days(days: int, now: datetime | None = None) -> list[DayRate]:
    return [DayRate(d, 0, 0) for d in day_span(days, now)]


def eligibility(
    *, now: datetime | None = None, weekly: dict[int, BackendStats] | None = None, levels: dict[int, str]
) -> dict[int, Eligibility]:
    """Each backend against the L3 bar over the last 7 days of pull_request jobs (thresholds in settings)."""
    if weekly is None:
        found = summary(days=7, event="pull_request", spark=False, now=now)
        weekly, run_p90 = found.weekly, found.pr_run_p90
    else:
        run_p90 = cached("pr-run-p90", now=now)
    return judge_all(levels, weekly, run_p90)


def judge_all(levels: dict[int, str], weekly: dict[int, BackendStats], run_p90: dict[int, float]) -> dict:
    result = {}
    for backend_id, level in levels.items():
        stats = weekly.get(backend_id, BackendStats())
        result[backend_id] = judge(level, stats, run_p90.get(backend_id))
    return result


def judge(level: str, stats: BackendStats, pr_run_p90: float | None) -> Eligibility:
    success = stats.counts.pass_rate
    meets_success = success is not None and success >= settings.HUD_L3_MIN_WEEKLY_SUCCESS_RATE
    meets_queue = stats.queue_p90 is None or stats.queue_p90 <= settings.HUD_L3_MAX_P90_QUEUE_MINUTES * 60
    meets_run = pr_run_p90 is None or pr_run_p90 <= settings.HUD_L3_MAX_PR_RUN_HOURS * 3600
    meets = meets_success and meets_queue and meets_run
    if success is None:
        verdict = "no-data"
    elif level in ("L3", "L4"):
        verdict = "meets-l3" if meets else "below-level"
    else:
        verdict = "meets-l3" if meets else "not-yet"
    return Eligibility(success, stats.queue_p90, pr_run_p90, meets_success, meets_queue, meets_run, verdict)


def summary(*, days: int, event: str, spark: bool = True, now: datetime | None = None) -> Summary:
    """The overview's job-result figures (stats over ``days``, the SPARK_DAYS sparklines unless ``spark`` is off,
    the L3 bar's week) from one pass over the latest attempts: one store call, one cache entry."""
    spark_since = day_start(SPARK_DAYS, now) if spark else None
    return cached("summary", days, event, spark_since, now=now)


def relay_health(*, days: int, now: datetime | None = None) -> RelayHealth:
    """Deliveries received, dispatches by state (lost: L2+ only) and callback rejections in the window."""
    return cached("relay", days, now=now)


def overview(*, days: int, event: str, now: datetime | None = None) -> Overview:
    """The /oot/ page: L4, L3, L2 tables (worst pass rate first; no data last) and the L1 list."""
    every = backends()
    found = summary(days=days, event=event, now=now)
    stats, spark = found.stats, every_day(found.daily, SPARK_DAYS, now)
    shown = [b for b in every if b.level in LEVELS_SHOWN]
    judged = judge_all({b.id: b.level for b in shown}, found.weekly, found.pr_run_p90)
    sections: dict[str, list[HealthRow]] = {level: [] for level in LEVELS_SHOWN}
    for b in shown:
        row_stats = stats.get(b.id, BackendStats())
        points = spark.get(b.id) or empty_days(SPARK_DAYS, now)
        sections[b.level].append(HealthRow(b, row_stats, points, judged[b.id]))
    for rows in sections.values():
        rows.sort(key=_worst_first)
    listed = [b for b in every if b.level not in LEVELS_SHOWN]
    return Overview(days, event, sections, listed, relay_health(days=days, now=now))


def _worst_first(row: HealthRow) -> tuple:
    rate_ = row.stats.counts.pass_rate
    return (rate_ is None, rate_ if rate_ is not None else 0.0, row.backend.repo.lower())


def backend_matrix(
    *, backend_id: int, days: int, event: str, failing_only: bool = False, page: int = 1, now: datetime | None = None
) -> Matrix:
    """Rows = tested SHAs (PR head SHAs for pull_request), most recent first, 50 a page; cells = latest attempts.

    A row's time is its latest job finish (or, for a lost dispatch, the dispatch time). ``failing_only`` keeps
    rows with a test or infrastructure failure (lost dispatches included). Columns are "workflow / job",
    sorted by workflow, then job name with numbers in numeric order.
    """
    rows, has_next = store().matrix(
        backend_id=backend_id, since=since(days, now), event=event, failing_only=failing_only, page=page
    )
    columns = sorted({c for r in rows for c in r.cells}, key=natural_key)
    return Matrix(columns, rows, page, has_next)


def pull_request(number: int) -> PrDetail | None:
    """One upstream PR: a group per L2+ backend (current level) that was dispatched or reported; None if unknown."""
    return store().pr_detail(number=number, backends=[b for b in backends() if b.level in LEVELS_SHOWN])


def job_detail(*, backend_id: int, job_id: int) -> JobDetail | None:
    """One job attempt of a backend with every attempt of the same job; None if it is not that backend's."""
    return store().job_detail(backend_id=backend_id, job_id=job_id)


def metrics(*, days: int, event: str, now: datetime | None = None) -> list[MetricsSeries]:
    """Daily pass rate per L2+ backend (L4 first, then by repo); days without runs are gaps."""
    daily = daily_pass_rates(days=days, event=event, now=now)
    shown = [b for b in backends() if b.level in LEVELS_SHOWN]
    shown.sort(key=lambda b: (LEVELS_SHOWN.index(b.level), b.repo.lower()))
    return [MetricsSeries(b, daily.get(b.id) or empty_days(days, now)) for b in shown]


def natural_key(text: str) -> tuple:
    """Sort "shard-10" after "shard-2"."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part.lower()) for part in re.split(r"(\d+)", text))
