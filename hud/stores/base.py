"""The store interface: what the HUD reads of job results, as rows, from PostgreSQL/SQLite or ClickHouse.

A store answers only reads over job results (``hud.stores.db.jobs``, ``hud.stores.clickhouse.jobs``); everything else
(the allowlist, dispatches, PR titles) and the assembly of pages from those rows is written once in
``hud.figures.pages``. Both stores return the same rows on the same data: the same columns and values, figure rows that
:func:`collect` reads, job rows in the order of ``JobResult.LATEST_ORDER`` with the columns of ``JOB_COLUMNS``.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Protocol

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from hud.stores.types import BackendStats, Counts, DayRate, Job, Summary
from ootci import gates
from ootci.models import Dispatch, JobResult, TestCase

# Test case statuses: the failing ones, and the results a flip or a pass rate counts (passes and failures).
CASE_FAILING = tuple(str(s) for s in TestCase.FAILING)
CASE_PASSED = str(TestCase.Status.PASSED)
CASE_COUNTED = (CASE_PASSED, *CASE_FAILING)

# A figure is asked for as (kind, window name); kinds: "stats" (BackendStats per backend, lost dispatches included),
# "daily" (DayRates per backend, only days with a total), "run" (p50 and p90 of PR run time per backend) and "gates"
# (the unrounded counts and average queue time the level gates read, ``ootci.gates``; hud.readiness.figures assembles
# them).
Ask = tuple[str, str]
Windows = dict[str, tuple[str, datetime]]  # name → (event, since)
# What each kind reads of a latest attempt, beyond backend_id, finished_at and outcome.
NEEDS = {
    "stats": ("pr_number", "conclusion", "queue_time", "execution_time"),
    "daily": (),
    "run": (),  # read from the event's newest attempts, not the window's latest
    "gates": ("conclusion", "queue_time", "execution_time", "dependency_wait"),
}
# Every figure row has these columns (a statement is a UNION ALL of one SELECT per figure), after ``kind``.
FIGURE_COLUMNS = {
    "backend_id": "bigint",
    "day": "date",
    "successes": "bigint",
    "test_failures": "bigint",
    "infra_failures": "bigint",
    "running": "bigint",
    "skipped": "bigint",
    "timed_out": "bigint",
    "overruns": "bigint",
    "prs": "bigint",
    "queue_median": "double precision",
    "queue_p90": "double precision",
    "queue_avg": "double precision",
    "dependency_avg": "double precision",
    "duration_median": "double precision",
    "duration_avg": "double precision",
    "last_run": "timestamp with time zone",
    "ok": "bigint",
    "total": "bigint",
    "p50": "double precision",
    "p90": "double precision",
}
# The latest-attempt outcomes each stats row counts: its column → JobResult.outcome.
OUTCOME_COUNTS = {
    "successes": JobResult.Outcome.SUCCESS.value,
    "test_failures": JobResult.Outcome.TEST.value,
    "infra_failures": JobResult.Outcome.INFRA.value,
    "running": JobResult.Outcome.RUNNING.value,
    "skipped": JobResult.Outcome.SKIPPED.value,
}
COUNTED = "outcome IN ('success', 'test', 'infra')"  # the latest attempts a total counts (hud.figures.queries)
OVERRUN_SECONDS = float(gates.OVERRUN_HOURS * 3600)  # a job that ran longer is an overrun (ootci.gates)
# The columns of a job row: every field of a Job (the JobResult columns of the same names).
JOB_COLUMNS = tuple(f.name for f in dataclasses.fields(Job))


@dataclass(frozen=True)
class BackendWindow:
    """The matrix's jobs: one backend's, of one event, finished since ``since``."""

    backend_id: int
    event: str
    since: datetime


def latest_order(prefix: str = "") -> str:
    """``JobResult.LATEST_ORDER`` as SQL: newest attempt first."""
    return ", ".join(
        f"{prefix}{f.lstrip('-')} {'DESC' if f.startswith('-') else 'ASC'}" for f in JobResult.LATEST_ORDER
    )


class Store(Protocol):
    def figure_rows(self, *, windows: Windows, asks: list[Ask], backend_id: int | None = None) -> list[dict]:
        """The rows of the figures ``asks`` over the latest attempts of each window (lost dispatches aside)."""

    def sha_keys(self, window: BackendWindow, *, failing_only: bool, limit: int) -> list[dict]:
        """The matrix rows of the window's latest attempts, as (pr_number, sha, at, bad): at = latest finish, bad =
        test and infrastructure failures; newest first, then by SHA; the first ``limit`` (with a failure only, if
        ``failing_only``)."""

    def sha_keys_of(self, window: BackendWindow, *, shas: list[str]) -> list[dict]:
        """The matrix rows, as ``sha_keys``, of the jobs tested on ``shas``."""

    def cells(self, window: BackendWindow, *, shas: list[str]) -> list[dict]:
        """Job rows (and ``job_sha``): the latest attempts in the window of the jobs tested on ``shas``."""


class CaseRows(Protocol):
    """The test cases the failing-tests view reads (``hud.failing``)."""

    def failing_cases(self, *, job_ids: list[int]) -> list[dict]:
        """The failing cases (job_id, test_id, status, reruns, message) of the jobs, by job, report, then case."""

    def cases_of(self, *, job_ids: list[int], test_ids: list[str]) -> list[dict]:
        """Every case (job_id, test_id, status, reruns) of ``test_ids`` in the jobs."""

    def history(self, *, tests: dict[int, list[str]], limit: int) -> dict[tuple[int, str], list[dict]]:
        """The last ``limit`` passed or failing results (status, reruns, job_id, job_sha, at = report time) of each
        test of ``tests`` (backend id → test ids) on its backend, newest first (report time, report, case), by
        (backend id, test id); a test without any: absent."""


class HistoryRows(Protocol):
    """The per-test rows the test search and test page read (``hud.history``)."""

    def search_rows(self, *, text: str, since: datetime, offset: int, limit: int) -> list[dict]:
        """Tests whose id contains ``text`` (any case) with results since ``since``: generic_id, last_failure (None
        when none failed), last_run, runs (counted results), failures; last failure newest first (none last), then
        by id in code-point order."""

    def history_rows(self, *, generic_id: str, since: datetime) -> list[dict]:
        """The test's results since ``since``, oldest first: backend_id, job_id, event_type, pr_number, sha,
        status, reruns, at (the report's arrival), report_id."""

    def failure_messages(self, *, generic_id: str, report_ids: list[int]) -> dict[int, str]:
        """The message of the test's last failing case in each of these reports, by report id."""


# --- rows into figures and jobs (the same for both stores) ----------------------------------------------------------


def collect(asks: list[Ask], rows: list[dict]) -> dict[Ask, Any]:
    """The figures asked for, from a store's figure rows and the lost-dispatch rows (``lost:w``, ``lostday:w``)."""
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_kind[r["kind"]].append(r)
    found: dict[Ask, Any] = {}
    for kind, w in asks:
        if kind == "stats":
            lost = {r["backend_id"]: int(r["total"]) for r in by_kind[f"lost:{w}"]}
            found[kind, w] = stats_from({r["backend_id"]: r for r in by_kind[f"stats:{w}"]}, lost)
        elif kind == "daily":
            found[kind, w] = daily_from([*by_kind[f"daily:{w}"], *by_kind[f"lostday:{w}"]])
        elif kind == "run":
            found[kind, w] = {r["backend_id"]: seconds(r["p90"]) for r in by_kind[f"run:{w}"] if r["p90"] is not None}
    return found


def stats_from(rows: dict[int, dict], lost: dict[int, int]) -> dict[int, BackendStats]:
    result = {}
    for bid in set(rows) | set(lost):
        r = rows.get(bid, {})
        counts = Counts(
            successes=int(r.get("successes") or 0),
            test_failures=int(r.get("test_failures") or 0),
            infra_failures=int(r.get("infra_failures") or 0) + lost.get(bid, 0),
            lost=lost.get(bid, 0),
            running=int(r.get("running") or 0),
            skipped=int(r.get("skipped") or 0),
            timed_out=int(r.get("timed_out") or 0),
        )
        result[bid] = BackendStats(
            counts=counts,
            prs=int(r.get("prs") or 0),
            queue_median=seconds(r.get("queue_median")),
            queue_p90=seconds(r.get("queue_p90")),
            queue_avg=seconds(r.get("queue_avg")),
            duration_median=seconds(r.get("duration_median")),
            duration_avg=seconds(r.get("duration_avg")),
            last_run=as_datetime(r.get("last_run")),
        )
    return dict(sorted(result.items()))


def daily_from(rows: list[dict]) -> dict[int, list[DayRate]]:
    sums: dict[int, dict[date, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for r in rows:
        cell = sums[r["backend_id"]][as_date(r["day"])]
        cell[0] += int(r["ok"])
        cell[1] += int(r["total"])
    return {
        bid: [DayRate(day, ok, total) for day, (ok, total) in sorted(days.items()) if total]
        for bid, days in sorted(sums.items())
    }


def summary_asks(*, event: str, since: datetime, spark_since: datetime | None) -> tuple:
    """The windows and figures of the overview's summary."""
    windows: Windows = {"w0": (event, since)}
    asks: list[Ask] = [("stats", "w0")]
    if spark_since is not None:
        windows["w1"] = (event, spark_since)
        asks.append(("daily", "w1"))
    return windows, asks


def summary_from(found: dict[Ask, Any]) -> Summary:
    return Summary(found["stats", "w0"], found.get(("daily", "w1"), {}))


def job_from_row(r: dict[str, Any]) -> Job:
    values = {name: r[name] for name in JOB_COLUMNS}
    return Job(
        **values
        | {
            "queue_time": seconds(r["queue_time"]),
            "dependency_wait": seconds(r["dependency_wait"]),
            "execution_time": seconds(r["execution_time"]),
            "failed_tests": tuple(r["failed_tests"] or ()),
            "one_shot": bool(r["one_shot"]),
            "relay_decided": bool(r["relay_decided"]),
        }
    )


def latest_attempts(rows: Iterable[dict]) -> list[dict]:
    """The first row of each job (``JobResult.JOB_FIELDS``) of ``rows`` given newest first: its latest attempt."""
    found: dict[tuple, dict] = {}
    for r in rows:
        found.setdefault(tuple(r[name] for name in JobResult.JOB_FIELDS), r)
    return list(found.values())


def as_datetime(value) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value.astimezone(UTC) if value is not None and value.tzinfo else value
    parsed = parse_datetime(str(value))
    return parsed.replace(tzinfo=UTC) if parsed and parsed.tzinfo is None else parsed


def as_date(value) -> date:
    return value if isinstance(value, date) and not isinstance(value, datetime) else date.fromisoformat(str(value)[:10])


def seconds(value) -> float | None:
    return None if value is None else round(float(value), 1)


def lost_rows(windows: Windows, asks: list[Ask], backend_id: int | None) -> list[dict]:
    """The lost dispatches the stats and daily figures count (``lost:w`` per backend, ``lostday:w`` per backend and
    UTC day, as ``store.collect`` reads them), found once since the earliest window and counted per window here."""
    counted = [("stats" if kind == "gates" else kind, w) for kind, w in asks if kind in ("stats", "daily", "gates")]
    if not counted:
        return []
    lost = Dispatch.objects.lost(since=min(windows[w][1] for _, w in counted))
    lost = lost.filter(delivery__event__in={windows[w][0] for _, w in counted})
    if backend_id is not None:
        lost = lost.filter(backend_id=backend_id)
    found = list(lost.order_by().values_list("backend_id", "delivery__event", "created_at"))
    rows = []
    for kind, w in counted:
        event, since = windows[w]
        mine = [(bid, at) for bid, ev, at in found if ev == event and at >= since]
        if kind == "stats":
            rows += [
                {"kind": f"lost:{w}", "backend_id": bid, "total": n} for bid, n in Counter(b for b, _ in mine).items()
            ]
        else:
            days = Counter((bid, at.astimezone(UTC).date()) for bid, at in mine)
            rows += [
                {"kind": f"lostday:{w}", "backend_id": bid, "day": day, "ok": 0, "total": n}
                for (bid, day), n in days.items()
            ]
    return rows


# --- windows ----------------------------------------------------------------------------------------------------------


def now_or(now: datetime | None) -> datetime:
    return now or timezone.now()


def since(days: int, now: datetime | None = None) -> datetime:
    """The start of the rolling window of the last ``days`` × 24 hours."""
    return now_or(now) - timedelta(days=days)
