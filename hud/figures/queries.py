"""The figures of the HUD's overview, backend, PR, job and metrics pages (and the same in the JSON API), cached.

The failing tests, failure lines and per-test history are read by their own features (``hud.failing.queries``,
``hud.history.queries``); the backends shown by ``hud.stores.allowlisted``.

How we count (the pages repeat this in their "how we count" note):

- **A job** is one (backend, event, tested SHA, workflow, job name). Its **result is its latest attempt**:
  the newest report (created time, then run attempt, then id), so a failed job that passed on re-run
  counts once, as a success.
- **Windows** select jobs by their finish time: completion, else start, else report time (a job whose
  in_progress callback was lost still shows, at its completion time). Windows are rolling: the last
  ``days`` × 24 hours.
- **Outcomes** of latest attempts: *success*; *test failure* = a failure classified test, build or lint
  (below), else ``failure`` with failed tests reported; *infrastructure failure* = classified infra, else
  ``failure`` without failed tests, ``cancelled``, ``timed_out`` or any other conclusion, plus every **lost
  dispatch** (sent or pending longer than ``ZOMBIE_TIMEOUT_HOURS`` with no callback at all) of an L2+
  backend; *running* = not completed yet; *skipped* (``skipped``, ``neutral``) is shown but not counted.
- **Failure classes** (``ootci.failures.rules.failure_verdict``; the job page says which decided): a failed job's class
is
  the first of the relay's facts (timed out by the sweeper: infra), its failed step (runner set-up or checkout:
  infra), the log rule that matched its failure line (``hud.failing.lines``), its parsed test report, its callback's
  test results (failed tests: test); failing all of them, infra. Test, build and lint classes count as test failures.
- **Total** = successes + test failures + infrastructure failures. **Pass rate** = successes ÷ total, in
  percent with one decimal; ``None`` (shown as "no data", never 0 %) when the total is 0.
- Times are seconds (floats rounded to 0.1). Medians and p90 are continuous percentiles
  (``percentile_cont``) over latest attempts that have the value.
- **A run** is one upstream event's jobs on a backend (PR and tested SHA): its time runs from the earliest start
  (else report time) to the last finish of its jobs' newest attempts that are not running, and it counts in a window
  when that last finish is in it, with its whole time (the readiness gates' end-to-end p50).

The job results underneath are read through a store (``hud.stores.base``), picked by :func:`store`: the Django
database (``hud.stores.db.jobs``), or with ``CLICKHOUSE_URL`` set the ClickHouse store (``hud.stores.clickhouse.jobs``);
both return the same rows on the same data, and the pages are assembled from them once (``hud.figures.pages``), so both
give identical figures (tests/hud/stores/test_clickhouse_parity.py). Outcome, finish time and tested SHA are the
JobResult columns that ``ootci.models`` defines; the levels shown come from ``ootci.levels.shown_on_hud()``. When a
ClickHouse read fails, the database answers and the page says so (``hud.stores.fallback``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from hud.figures import pages, probes
from hud.readiness import figures as hud_readiness
from hud.stores import allowlisted, softcache
from hud.stores.base import Store, now_or, since
from hud.stores.clickhouse.jobs import ClickHouseStore
from hud.stores.db.jobs import DatabaseStore
from hud.stores.fallback import FallbackStore, clickhouse_failed, source, unit_of_work
from hud.stores.types import (
    EVENTS,
    BackendInfo,
    BackendStats,
    DayRate,
    HealthRow,
    JobDetail,
    Matrix,
    MetricsSeries,
    Overview,
    PrDetail,
    ProbeCard,
    RelayHealth,
    Summary,
)
from ootci import gates, governance, levels, staleness
from ootci.models import Backend

SPARK_DAYS = 14


def store() -> Store:
    """The store every query reads: ClickHouse when configured (falling back to the database), else the database."""
    if source() != "clickhouse":
        return DatabaseStore()
    return FallbackStore(ClickHouseStore(), DatabaseStore(), failed=clickhouse_failed)


# Every cached figure: its name → the store call that computes it from its cache key (and ``now``).
FIGURES: dict[str, Callable[..., Any]] = {
    "stats": lambda days, event, backend_id, now=None: pages.backend_stats(
        store(), since=since(days, now), event=event, backend_id=backend_id
    ),
    "daily": lambda start, event, backend_id, now=None: pages.daily(
        store(), since=start, event=event, backend_id=backend_id
    ),
    "readiness": lambda now=None: hud_readiness.figures(store(), now=now_or(now)),
    "relay": lambda days, now=None: pages.relay_health(since=since(days, now)),
    "probes": lambda now=None: probes.cards(now=now_or(now)),
    "summary": lambda days, event, spark_since, now=None: summary_compute(days, event, spark_since, now_or(now)),
}


def summary_compute(days: int, event: str, spark_since: datetime | None, now: datetime) -> Summary:
    """``pages.summary`` at one ``now``."""
    return pages.summary(store(), event=event, since=since(days, now), spark_since=spark_since)


def cached(name: str, *key, now: datetime | None = None):
    """``FIGURES[name](*key)`` from the cache if it was computed less than HUD_CACHE_SECONDS ago, else computed here
    and cached. The figures the pages show by default are recomputed every minute by :func:`figures_refresh`, so
    their requests find them cached; a request itself never enqueues work. Calls with an explicit ``now`` (tests,
    parity checks) always compute."""
    if now is not None or not settings.HUD_CACHE_SECONDS:
        return FIGURES[name](*key, now=now)
    return softcache.through_cache(name, key, lambda: FIGURES[name](*key))


def figures_refresh(*, days: tuple[int, ...], metric_days: tuple[int, ...]) -> None:
    """Recompute and cache what the overview (page and API) shows for each of ``days`` and the metrics page for each
    of ``metric_days``, for the default event: the task ``hud.tasks.figures_refresh``, scheduled every minute. It
    draws those pages' figures through ``cached`` with the cache read skipped, so it fills exactly their keys."""
    if not settings.HUD_CACHE_SECONDS:
        return
    token = softcache.refreshing.set(True)
    try:
        with unit_of_work():
            for window in days:
                overview(days=window, event=EVENTS[0])
            for window in metric_days:
                metrics(days=window, event=EVENTS[0])
    finally:
        softcache.refreshing.reset(token)


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
    """``pages.daily`` figures with the days without runs filled in (see daily_pass_rates)."""
    span = day_span(days, now)
    result = {}
    for backend_id, points in found.items():
        by_day = {p.day: p for p in points}
        result[backend_id] = [by_day.get(d, DayRate(d, 0, 0)) for d in span]
    return result


def empty_days(days: int, now: datetime | None = None) -> list[DayRate]:
    return [DayRate(d, 0, 0) for d in day_span(days, now)]


def readiness_figures(*, now: datetime | None = None) -> gates.Figures:
    """Every backend's readiness figures (``hud.readiness.figures``; fixed windows, whatever a page shows)."""
    return cached("readiness", now=now)


def readiness(*, shown: list[BackendInfo] | None = None, now: datetime | None = None) -> dict[int, gates.Readiness]:
    """Each backend of ``shown`` (default: every enabled one) against the level gates (``ootci.gates``)."""
    levels_ = {b.id: b.level for b in (allowlisted.backends() if shown is None else shown)}
    return governance.readiness_judged(levels_, readiness_figures(now=now), now=now_or(now))


def summary(*, days: int, event: str, spark: bool = True, now: datetime | None = None) -> Summary:
    """The overview's job-result figures (stats over ``days``, the SPARK_DAYS sparklines unless ``spark`` is off)
    from one pass over the latest attempts: one store call, one cache entry."""
    spark_since = day_start(SPARK_DAYS, now) if spark else None
    return cached("summary", days, event, spark_since, now=now)


def relay_health(*, days: int, now: datetime | None = None) -> RelayHealth:
    """Deliveries received, dispatches by state (lost: L2+ only) and callback rejections in the window."""
    return cached("relay", days, now=now)


def overview(*, days: int, event: str, now: datetime | None = None) -> Overview:
    """The /oot/ page: L4, L3, L2 tables (worst pass rate first; no data last), the L1 list and the relay's probe
    cards (the probes are in no table: ``hud.figures.probes``)."""
    found_backends = allowlisted.backends()
    every = [b for b in found_backends if not b.probe]
    cards = probe_cards(now=now) if any(b.probe for b in found_backends) else []
    found = summary(days=days, event=event, now=now)
    stats, spark = found.stats, every_day(found.daily, SPARK_DAYS, now)
    shown = [b for b in every if b.level in levels.shown_on_hud()]
    judged = readiness(shown=shown, now=now)
    sections: dict[str, list[HealthRow]] = {level: [] for level in levels.shown_on_hud()}
    for b in shown:
        row_stats = stats.get(b.id, BackendStats())
        points = spark.get(b.id) or empty_days(SPARK_DAYS, now)
        sections[b.level].append(HealthRow(b, row_stats, points, judged[b.id]))
    for rows in sections.values():
        rows.sort(key=_worst_first)
    listed = [b for b in every if b.level not in levels.shown_on_hud()]
    return Overview(days, event, sections, listed, relay_health(days=days, now=now), cards)


def probe_cards(*, now: datetime | None = None) -> list[ProbeCard]:
    """The relay-health cards of the relay's probes (``hud.figures.probes``), whatever window the page shows."""
    return cached("probes", now=now)


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
    return pages.matrix(
        store(), backend_id=backend_id, since=since(days, now), event=event, failing_only=failing_only, page=page
    )


# The PR and job pages read by key, from the database even with ClickHouse configured: the system of record, so a job
# reported and not yet replicated is on them (the PR page's failing tests and first failed tests, read there too,
# link to it), and faster for a point read (9 ms against 124 ms at 1,000,000 job results, with no engine to start).


def pull_request(number: int) -> PrDetail | None:
    """One upstream PR: a group per L2+ backend (current level) that was dispatched or reported; None if unknown."""
    return pages.pull_request(DatabaseStore(), number=number, backends=allowlisted.shown())


def job_detail(*, backend_id: int, job_id: int) -> JobDetail | None:
    """One job attempt of a backend with every attempt of the same job; None if it is not that backend's."""
    return pages.job_detail(DatabaseStore(), backend_id=backend_id, job_id=job_id)


def metrics(*, days: int, event: str, now: datetime | None = None) -> list[MetricsSeries]:
    """Daily pass rate per L2+ backend (L4 first, then by repo); days without runs are gaps."""
    daily = daily_pass_rates(days=days, event=event, now=now)
    return [MetricsSeries(b, daily.get(b.id) or empty_days(days, now)) for b in allowlisted.shown()]


def since_days(days: int, now: datetime | None = None) -> datetime:
    """The start of a rolling window of ``days`` × 24 hours (the pages' windows)."""
    return since(days, now)


def silent(backend_ids: list[int]) -> dict[int, str]:
    """What ootci.staleness says of the silent ones among these backends ("silent for 31 h (no nightly result)"):
    four queries for any number of backends."""
    now = timezone.now()
    found = staleness.silences(list(Backend.objects.filter(pk__in=backend_ids)), now=now) if backend_ids else {}
    return {bid: silence.text(now) for bid, silence in found.items()}
