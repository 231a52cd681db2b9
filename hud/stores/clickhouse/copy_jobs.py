"""Replication of job results from PostgreSQL to ClickHouse (`oot_workflow_job`), through
`hud.stores.clickhouse.connection`.

`replicate()` runs as the django-q2 task `hud.tasks.clickhouse_replicate`, every minute and after job results are
written (`ootci.replication.job_results_changed`); `backfill_clickhouse` runs it to copy everything. Rows are copied
as they are, the domain columns `finished_at`, `job_sha` and `outcome` included (PostgreSQL computes them).

`newer_finished_at` (see `hud.stores.clickhouse.connection`): rows arrive without it (NULL: pending, in no window); at
the end of each run replication recomputes it for every attempt of the jobs on the SHAs of pending rows and stores
again, with the same version, the rows whose value changed (of equal versions ReplacingMergeTree keeps the last
inserted). A row that moves to another job (a head SHA reported late) or is deleted first marks the attempts it leaves
pending. Whatever a stopped run left pending, the next one (or `ensure_schema`) computes.
"""

import json
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from hud.models import ReplicationCursor
from hud.stores.base import latest_order
from hud.stores.clickhouse import connection as clickhouse
from hud.stores.clickhouse.connection import KEY, TABLE, ClickHouseError
from ootci import replication
from ootci.models import JobResult

CURSOR_NAME = TABLE
BATCH_SIZE = 5000
# How long a transaction may stay open between setting updated_at and committing and still be replicated
# by the next run (plus clock skew between app servers): that much before the last run is read again.
OVERLAP = timedelta(seconds=60)
CHDB_LEFTOVER_PARTS = 100
_LOCK_KEY = 7_020_011  # PostgreSQL advisory lock: one replication run at a time
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LINK_ALL = 10_000  # with more SHAs than this to relink, one pass over the whole table is cheaper
# The rows of the jobs tested on the SHAs bound as `shas`, for a FINAL read: their sorting keys are found first,
# without FINAL, through the job_sha skip index.
_IN_SHAS = "job_sha IN {shas:Array(String)}"
OF_SHAS = f"{KEY} IN (SELECT {KEY} FROM {TABLE} WHERE {_IN_SHAS}) AND {_IN_SHAS}"

# ClickHouse column → JobResult lookup, in insert order.
COLUMNS: dict[str, str] = {
    "id": "id",
    "backend_id": "backend_id",
    "backend_repo": "backend__repo",
    "backend_level": "backend__level",
    "backend_device": "backend__device",
    "dispatch_id": "dispatch_id",
    "delivery_id": "delivery_id",
    "event_type": "event_type",
    "upstream_repo": "upstream_repo",
    "pr_number": "pr_number",
    "head_sha": "head_sha",
    "workflow_name": "workflow_name",
    "job_name": "job_name",
    "run_id": "run_id",
    "run_attempt": "run_attempt",
    "check_run_id": "check_run_id",
    "status": "status",
    "conclusion": "conclusion",
    "started_at": "started_at",
    "completed_at": "completed_at",
    "finished_at": "finished_at",
    "job_sha": "job_sha",
    "outcome": "outcome",
    "queue_time": "queue_time",
    "dependency_wait": "dependency_wait",
    "sha_check": "sha_check",
    "execution_time": "execution_time",
    "passed": "passed",
    "failed": "failed",
    "skipped": "skipped",
    "failed_tests": "failed_tests",
    "artifact_url": "artifact_url",
    "run_url": "run_url",
    "level": "level",
    "upstream_check_run_id": "upstream_check_run_id",
    "one_shot": "one_shot",
    "relay_decided": "relay_decided",
    "source": "source",
    "created_at": "created_at",
    "updated_at": "updated_at",
}
INSERT_COLUMNS = [*COLUMNS, "version"]
_FAILED_TESTS = list(COLUMNS).index("failed_tests")
_UPDATED_AT = list(COLUMNS).index("updated_at")
_JOB_SHA = list(COLUMNS).index("job_sha")
_CREATED_AT = list(COLUMNS).index("created_at")


def ensure_schema() -> None:
    """Create the table when missing (``clickhouse.create_schema``) and compute newer_finished_at where it is unknown
    (rows of a run that stopped before it computed them); safe to run any number of times."""
    clickhouse.create_schema()
    with clickhouse.session():
        if _pending_shas():
            with _replication_lock(wait=True):  # with the database only then, and again: a run may have linked them
                _link_pending()


def _mark_pending(shas: Collection[str]) -> None:
    """Store again, with newer_finished_at unknown, the rows of the jobs tested on ``shas``: the next
    ``_link_pending`` recomputes those jobs, even if this run stops before it."""
    columns = ", ".join(INSERT_COLUMNS)
    sql = f"INSERT INTO {TABLE} ({columns}) SELECT {columns} FROM {TABLE} FINAL WHERE {OF_SHAS}"
    clickhouse.command(sql, {"shas": sorted(shas)})


def _link_pending() -> None:
    """Compute newer_finished_at for every attempt of the jobs on the SHAs of rows stored without it."""
    shas = _pending_shas()
    if shas:
        _link(shas if len(shas) <= LINK_ALL else None)


def _pending_shas() -> list[str]:
    pending = f"SELECT {KEY} FROM {TABLE} WHERE newer_finished_at IS NULL"  # any version: through a small column
    sql = f"SELECT DISTINCT job_sha FROM {TABLE} FINAL WHERE {KEY} IN ({pending}) AND newer_finished_at IS NULL"
    return [sha for (sha,) in clickhouse.rows(sql)]


def _link(shas: Collection[str] | None) -> None:
    """Recompute newer_finished_at for every attempt of the jobs tested on ``shas`` (of every job: None) and store
    again, with the same version, the rows whose value changed (of equal versions the last inserted wins). Other
    jobs on those SHAs come along (a coarser, cheaper condition); their values do not change.

    The running MAX that finds the values sorts only identifying columns; the rows to store again are read back by
    sorting key."""
    where = f"WHERE {OF_SHAS}" if shas is not None else ""
    newer = (
        f"max(finished_at) OVER (PARTITION BY {', '.join(JobResult.JOB_FIELDS)}"
        f" ORDER BY {latest_order()} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
    )
    changed = f"""
        SELECT backend_id, event_type, created_at, id, newer FROM (
            SELECT backend_id, event_type, created_at, id, newer_finished_at AS stored, {newer} AS newer
            FROM {TABLE} FINAL {where}
        ) WHERE stored IS NULL OR newer != stored"""
    columns = ", ".join(INSERT_COLUMNS)
    clickhouse.command(
        f"""INSERT INTO {TABLE} ({columns}, newer_finished_at)
        SELECT {columns}, linked.newer FROM {TABLE} FINAL
        INNER JOIN ({changed}) AS linked USING (backend_id, event_type, created_at, id) {where}""",
        {"shas": sorted(shas)} if shas is not None else None,
    )


def replicate(
    *,
    batch_size: int = BATCH_SIZE,
    wait: bool = False,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Copy JobResult rows changed since the cursor to ClickHouse, in batches; returns the rows sent.

    The cursor moves only after ClickHouse accepted a batch, so a failure (ClickHouseError) or a killed
    worker loses nothing: the next run starts where the last accepted batch ended. Rows committed late
    (after a run had read past their updated_at) are caught by re-reading `OVERLAP` before the last
    complete run. Re-sent rows collapse in ReplacingMergeTree. Only one run at a time: a run that finds
    another in progress returns 0 at once (or waits, with `wait`), as the running one will carry on.
    """
    replication.replication_started()
    with _replication_lock(wait=wait) as acquired:
        if not acquired:
            return 0
        cursor, _ = ReplicationCursor.objects.get_or_create(name=CURSOR_NAME)
        started = timezone.now()
        after = cursor.start_position(bound=started - OVERLAP)
        sent = 0
        try:
            ensure_schema()  # a fresh store needs no separate step before the schedule fills it
            with clickhouse.session():
                while True:
                    rows = _read_batch(after=after, limit=batch_size)
                    if not rows:
                        break
                    moved = _moved_from(rows)
                    if moved:
                        _mark_pending(moved)
                    clickhouse.insert(rows, column_names=INSERT_COLUMNS)  # newer_finished_at NULL: pending
                    last = rows[-1]
                    after = (last[_UPDATED_AT], last[0])
                    cursor.advance(updated_at=after[0], row_id=after[1], rows=len(rows))
                    sent += len(rows)
                    if on_batch:
                        on_batch(len(rows))
                    if len(rows) < batch_size:
                        break
                _link_pending()
                clickhouse.remove_leftover_parts(more_than=CHDB_LEFTOVER_PARTS)
        except ClickHouseError as ex:
            cursor.fail(error=str(ex), at=timezone.now())
            raise
        cursor.finish(reread_from=started - OVERLAP, at=timezone.now())
        return sent


def _moved_from(rows: list[list[Any]]) -> set[str]:
    """The tested SHAs that rows leave (as stored in ClickHouse now): a late-reported head SHA moves a row from the
    job of its delivery to another, and the attempts left behind may be latest again."""
    sql = (
        f"SELECT id, job_sha FROM {TABLE} WHERE id IN {{ids:Array(UInt64)}}"
        " AND created_at BETWEEN {first:DateTime64(6, 'UTC')} AND {last:DateTime64(6, 'UTC')}"
    )
    created = [row[_CREATED_AT] for row in rows]
    parameters = {"ids": [row[0] for row in rows], "first": min(created), "last": max(created)}
    sha = {row[0]: row[_JOB_SHA] for row in rows}
    return {stored for row_id, stored in clickhouse.rows(sql, parameters) if stored != sha[row_id]}


def pending_rows() -> int:
    """How many JobResult rows the next run would read (for progress reports)."""
    cursor, _ = ReplicationCursor.objects.get_or_create(name=CURSOR_NAME)
    after = cursor.start_position(bound=timezone.now() - OVERLAP)
    return _after(JobResult.objects.all(), after).count()


def reset_cursor() -> None:
    """Make the next run copy every row again from the first (used by `backfill_clickhouse --restart`)."""
    cursor, _ = ReplicationCursor.objects.get_or_create(name=CURSOR_NAME)
    cursor.reset()


def prune_deleted() -> int:
    """Mark rows whose JobResult no longer exists as deleted; returns how many.

    Deletes leave no updated_at to follow (a JobResult only goes when its Backend is deleted; the
    allowlist disables backends instead), so incremental replication does not see them and
    `backfill_clickhouse` reconciles them here with tombstones that FINAL reads leave out.
    """
    with _replication_lock(wait=True), clickhouse.session():  # relinking must not race a replication run
        stored = clickhouse.rows(f"SELECT id, backend_id, event_type, created_at, job_sha FROM {TABLE} FINAL")
        known = set(JobResult.objects.values_list("id", flat=True))
        gone = [row for row in stored if row[0] not in known]
        if gone:
            _mark_pending({row[4] for row in gone})  # older attempts of their jobs may be latest now
            version = _micros(timezone.now())
            tombstones = [[*row[:4], _EPOCH, version, 1] for row in gone]  # never pending
            columns = ["id", "backend_id", "event_type", "created_at", "newer_finished_at", "version", "is_deleted"]
            clickhouse.insert(tombstones, column_names=columns)
            _link_pending()
    return len(gone)


def optimize() -> None:
    """Merge each partition into one part of latest versions (``OPTIMIZE … FINAL``), so that FINAL reads have nothing
    left to merge. After a backfill: its thousands of inserts leave many parts, and chdb merges in the background
    only while a process holds the directory. Rewrites the table: minutes on a server for tens of millions of rows.
    On chdb, waits until the replaced parts are deleted, which later (short) units of work would not do."""
    with clickhouse.session():
        clickhouse.command(f"OPTIMIZE TABLE {TABLE} FINAL")
        clickhouse.remove_leftover_parts()


def _read_batch(*, after: tuple[datetime, int] | None, limit: int) -> list[list[Any]]:
    rows = _after(JobResult.objects.all(), after).order_by("updated_at", "id").values_list(*COLUMNS.values())
    batch = []
    for row in rows[:limit]:
        values = list(row)
        values[_FAILED_TESTS] = json.dumps(values[_FAILED_TESTS])
        values.append(_micros(values[_UPDATED_AT]))
        batch.append(values)
    return batch


def _after(rows, after: tuple[datetime, int] | None):
    if after is None:
        return rows
    updated_at, row_id = after
    # The leading range on updated_at lets PostgreSQL walk its updated_at index in order.
    return rows.filter(Q(updated_at__gt=updated_at) | Q(id__gt=row_id), updated_at__gte=updated_at)


def _micros(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


@contextmanager
def _replication_lock(*, wait: bool) -> Iterator[bool]:
    # A session-level advisory lock is released by PostgreSQL if the worker dies mid-run. Elsewhere
    # (SQLite, one machine) runs are not serialised: the cursor never moves back and copies collapse.
    if connection.vendor != "postgresql":
        yield True
        return
    with connection.cursor() as db:
        db.execute("SELECT pg_advisory_lock(%s)" if wait else "SELECT pg_try_advisory_lock(%s)", [_LOCK_KEY])
        acquired = wait or db.fetchone()[0]
    try:
        yield acquired
    finally:
        if acquired:
            with connection.cursor() as db:
                db.execute("SELECT pg_advisory_unlock(%s)", [_LOCK_KEY])
