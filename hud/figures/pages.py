"""Page assembly, written once for both stores: figures with their lost dispatches, the backend matrix, the PR page,
the job page and relay health.

A store (``hud.stores.base``) gives the job-result rows (the PR and job pages: the database's, ``DatabaseStore``, read
by key); what is not a job result (the allowlist, dispatches, deliveries, callback rejections, PR titles) is read here
from the database. Lost dispatches come from the one selector, ``Dispatch.objects.lost``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import Count, Q

from hud.stores.base import (
    Ask,
    BackendWindow,
    Store,
    Windows,
    collect,
    job_from_row,
    latest_attempts,
    lost_rows,
    summary_asks,
    summary_from,
)
from hud.stores.types import (
    BackendInfo,
    BackendStats,
    DayRate,
    Job,
    JobDetail,
    Matrix,
    MatrixRow,
    PrDetail,
    PrGroup,
    RelayHealth,
    Summary,
    Waiting,
)
from ootci import levels
from ootci.journal_figures import journal_figures
from ootci.models import CallbackRejection, Delivery, Dispatch, PullRequest, lost_cutoff

if TYPE_CHECKING:
    from hud.stores.db.jobs import DatabaseStore

PER_PAGE = 50


# --- figures: a store's rows and the lost dispatches ---------------------------------------------------------------


def figures(store: Store, windows: Windows, asks: list[Ask], backend_id: int | None = None) -> dict[Ask, Any]:
    """The figures asked for: each window's latest attempts from the store, its lost dispatches from the database."""
    rows = store.figure_rows(windows=windows, asks=asks, backend_id=backend_id)
    return collect(asks, rows + lost_rows(windows, asks, backend_id))


def backend_stats(
    store: Store, *, since: datetime, event: str, backend_id: int | None = None
) -> dict[int, BackendStats]:
    return figures(store, {"w": (event, since)}, [("stats", "w")], backend_id)["stats", "w"]


def daily(store: Store, *, since: datetime, event: str, backend_id: int | None = None) -> dict[int, list[DayRate]]:
    """DayRates per backend, only the days with a total."""
    return figures(store, {"w": (event, since)}, [("daily", "w")], backend_id)["daily", "w"]


def pr_run_p90(store: Store, *, since: datetime) -> dict[int, float]:
    return figures(store, {"w": ("pull_request", since)}, [("run", "w")])["run", "w"]


def summary(store: Store, *, event: str, since: datetime, spark_since: datetime | None) -> Summary:
    """The overview's job-result figures, each window's latest attempts picked once (one store statement)."""
    windows, asks = summary_asks(event=event, since=since, spark_since=spark_since)
    return summary_from(figures(store, windows, asks))


def relay_health(*, since: datetime) -> RelayHealth:
    """Deliveries, dispatches by state (lost: the lost selector) and callback rejections since ``since``."""
    lost = Dispatch.objects.lost(since=since).values("pk")
    states = {state: Count("id", filter=Q(status=state)) for state in Dispatch.Status.values}
    waiting = Q(status=Dispatch.Status.PENDING, retry_at__isnull=False)
    dispatches = Dispatch.objects.filter(created_at__gte=since).aggregate(
        **states, lost=Count("id", filter=Q(pk__in=lost)), waiting=Count("id", filter=waiting)
    )
    journal = journal_figures()
    return RelayHealth(
        deliveries=Delivery.objects.filter(received_at__gte=since).count(),
        dispatches_sent=dispatches[Dispatch.Status.SENT],
        dispatches_failed=dispatches[Dispatch.Status.FAILED],
        dispatches_pending=dispatches[Dispatch.Status.PENDING],
        dispatches_lost=dispatches["lost"],
        dispatches_waiting=dispatches["waiting"],
        callback_rejections=CallbackRejection.objects.filter(received_at__gte=since).count(),
        journal_waiting=journal[0],
        journal_dead=journal[1],
    )


# --- the backend matrix ----------------------------------------------------------------------------------------------


def matrix(store: Store, *, backend_id: int, since: datetime, event: str, failing_only: bool, page: int) -> Matrix:
    """A page of the matrix: the store's SHA rows and the lost dispatches' SHAs, merged (see queries.backend_matrix).

    The page of that union: the store's first rows up to the page's end, plus the rows of SHAs that also have a lost
    dispatch (whose time or failure that dispatch may change).
    """
    offset = (page - 1) * PER_PAGE
    lost = lost_keys(backend_id=backend_id, since=since, event=event)
    window = BackendWindow(backend_id, event, since)
    found = store.sha_keys(window, failing_only=failing_only, limit=offset + PER_PAGE + 1)
    if lost:
        found += store.sha_keys_of(window, shas=sorted({sha for (_, sha), _ in lost}))
    keyed = {(r["pr_number"], r["sha"]): [r["at"], r["bad"], 0] for r in found}
    for key, at in lost:
        row = keyed.setdefault(key, [at, 0, 0])
        row[0], row[1], row[2] = max(row[0], at), row[1] + 1, row[2] + 1
    rows = [(key, at, n_lost) for key, (at, bad, n_lost) in keyed.items() if bad or not failing_only]
    rows.sort(key=lambda k: k[0][1])
    rows.sort(key=lambda k: k[1], reverse=True)  # stable: newest first, then by SHA
    rows = rows[offset : offset + PER_PAGE + 1]
    has_next = len(rows) > PER_PAGE
    rows = rows[:PER_PAGE]
    cells: dict[tuple, dict[str, Job]] = defaultdict(dict)
    for r in store.cells(window, shas=[sha for (_, sha), _, _ in rows]):
        job = job_from_row(r)
        cells[r["pr_number"], r["job_sha"]][job.column] = job
    titles = {pr.number: pr for pr in PullRequest.objects.filter(number__in=[n for (n, _), _, _ in rows if n])}
    shown = []
    for (number, sha), at, n_lost in rows:
        pr = titles.get(number)
        shown.append(
            MatrixRow(number, sha, pr.title if pr else "", pr.author if pr else "", at, n_lost, cells[number, sha])
        )
    columns = sorted({c for r in shown for c in r.cells}, key=natural_key)
    return Matrix(columns, shown, page, has_next)


def lost_keys(*, backend_id: int, since: datetime, event: str) -> list[tuple[tuple[int | None, str], datetime]]:
    """The (PR number, tested SHA) and time of each lost dispatch of the backend in the window."""
    lost = Dispatch.objects.lost(since=since).filter(backend_id=backend_id, delivery__event=event)
    found = lost.order_by().values_list(
        "delivery__pull_request__number", "delivery__head_sha", "delivery__delivery_id", "created_at"
    )
    # A delivery's tested SHA, as JobResult.job_sha for its jobs: the head SHA, else the delivery id.
    return [((number, sha or delivery_id), at) for number, sha, delivery_id, at in found]


def natural_key(text: str) -> tuple:
    """Sort "shard-10" after "shard-2"."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part.lower()) for part in re.split(r"(\d+)", text))


# --- the PR page and the job page ------------------------------------------------------------------------------------


def pull_request(store: DatabaseStore, *, number: int, backends: list[BackendInfo]) -> PrDetail | None:
    """One upstream PR: a group per backend of ``backends`` that was dispatched or reported; None if unknown."""
    pr = PullRequest.objects.filter(upstream_repo=settings.UPSTREAM_REPO, number=number).first()
    rows = store.pr_jobs(number=number)  # newest first
    if pr is None and not rows:
        return None
    by_id = {b.id: b for b in backends}
    head = pr.head_sha if pr and pr.head_sha else rows[0]["head_sha"]
    waiting = waiting_dispatches(number, head, set(by_id))
    groups = []
    for bid, info in by_id.items():
        mine = [r for r in rows if r["backend_id"] == bid]
        if not mine and bid not in waiting:
            continue
        latest = latest_attempts(r for r in mine if r["head_sha"] == head)
        current = sorted(map(job_from_row, latest), key=lambda j: (_failures_first(j.outcome), natural_key(j.column)))
        shown = {j.id for j in current}
        earlier = [job_from_row(r) for r in mine if r["id"] not in shown]
        groups.append(PrGroup(info, current, earlier, waiting.get(bid) if not current else None))
    order = levels.shown_on_hud()
    groups.sort(key=lambda g: (order.index(g.backend.level), g.backend.repo.lower()))
    return PrDetail(
        number=number,
        upstream_repo=pr.upstream_repo if pr else (rows[0]["upstream_repo"] if rows else ""),
        title=pr.title if pr else "",
        author=pr.author if pr else "",
        labels=tuple(pr.labels) if pr else (),
        state=pr.state if pr else "",
        head_sha=head,
        html_url=pr.html_url if pr else "",
        groups=groups,
    )


def _failures_first(outcome: str) -> int:
    return {"test": 0, "infra": 0, "running": 1}.get(outcome, 2)


def waiting_dispatches(number: int, head: str, backend_ids: set[int]) -> dict[int, Waiting]:
    """Per backend, the state of its newest dispatch of the head SHA that has no report."""
    cutoff = lost_cutoff()
    found: dict[int, Waiting] = {}
    dispatches = (
        Dispatch.objects.filter(delivery__pull_request__number=number, delivery__head_sha=head)
        .filter(backend_id__in=backend_ids, jobs__isnull=True)
        .order_by("-created_at")
    )
    for dp in dispatches:
        if dp.backend_id in found:
            continue
        state = "failed" if dp.status == Dispatch.Status.FAILED else "lost" if dp.created_at < cutoff else "waiting"
        found[dp.backend_id] = Waiting(state, dp.created_at)
    return found


def job_detail(store: DatabaseStore, *, backend_id: int, job_id: int) -> JobDetail | None:
    """One job attempt of a backend with every attempt of the same job; None if it is not that backend's."""
    attempts = [job_from_row(r) for r in store.job_attempts(backend_id=backend_id, job_id=job_id)]
    job = next((j for j in attempts if j.id == job_id), None)
    if job is None:
        return None
    title = ""
    if job.pr_number:
        title = PullRequest.objects.filter(number=job.pr_number).values_list("title", flat=True).first() or ""
    return JobDetail(job, attempts, title)
