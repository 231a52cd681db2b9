"""ClickHouse, the HUD's optional analytics store: the only module that uses clickhouse-connect.

PostgreSQL stays the system of record. Every JobResult is copied to the table `oot_workflow_job`
(ReplacingMergeTree) by `replicate()`, which the django-q2 task `hud.tasks.clickhouse_replicate` runs
every minute and after job results are written (`ootci.replication.job_results_changed`).

`settings.CLICKHOUSE_URL` selects the store:

- `http(s)://user:password@host:8123/database` — a ClickHouse server or cluster;
- `chdb:///absolute/path` — the embedded engine (chdb) on a data directory. Only one process can hold a
  directory at a time, so `client()` opens it for one unit of work and closes it at the end; a process
  that finds it held waits a little (`CHDB_BUSY_WAIT`) and then fails. Deployments with several
  processes (gunicorn workers, qcluster) use a server.

Reading: a row is stored again each time its JobResult changes (and the replication overlap re-sends
recent rows), so rows only collapse to the latest version at merge time. Queries must deduplicate:
`SELECT … FROM oot_workflow_job FINAL` (simplest; ClickHouse merges at read time and drops rows marked
deleted), or `argMax(column, version) … GROUP BY id` with `HAVING argMax(is_deleted, version) = 0`.

Latest attempts: each row also carries `newer_finished_at`, the latest finish time of the newer attempts of its
job (hud.queries: the same backend, event, tested SHA `job_sha`, workflow and job name; newer by created_at,
run_attempt, id), 1970 when it has none. A row is its job's latest attempt within a window starting at `t` exactly
when `finished_at >= t > newer_finished_at`, so the HUD reads latest attempts with a filter instead of grouping by job.
Rows arrive from PostgreSQL without it (NULL: pending, in no window); at the end of each run replication recomputes it
for every attempt of the jobs on the SHAs of pending rows and stores again, with the same version, the rows whose
value changed (of equal versions ReplacingMergeTree keeps the last inserted). A row that moves to another job (a head
SHA reported late) or is deleted first marks the attempts it leaves pending. Whatever a stopped run left pending, the
next one (or `ensure_schema`) computes.
"""

import json
import logging
import os
import re
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote, urlparse

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import Error as DriverError
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from hud.models import ReplicationCursor
from ootci import replication
from ootci.models import JobResult

logger = logging.getLogger(__name__)

TABLE = "oot_workflow_job"
CURSOR_NAME = TABLE
BATCH_SIZE = 5000
# How long a transaction may stay open between setting updated_at and committing and still be replicated
# by the next run (plus clock skew between app servers): that much before the last run is read again.
OVERLAP = timedelta(seconds=60)
CHDB_BUSY_WAIT = 10.0
# chdb deletes the parts that merges replaced only in a session open for about cleanup_delay_period (30 s + up to
# 10 s by default), which units of work never are; every open loads the leftovers again (tens of ms per hundred).
# With these settings a session of a second or two cleans up, and a run that finds many leftovers waits for it.
CHDB_SETTINGS = {"cleanup_delay_period": 1, "max_cleanup_delay_period": 1, "cleanup_delay_period_random_add": 0}
CHDB_LEFTOVER_PARTS = 100
CHDB_CLEANUP_WAIT = 5.0
_LOCK_KEY = 7_020_011  # PostgreSQL advisory lock: one replication run at a time
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

KEY = "(backend_id, event_type, created_at, id)"  # the sorting key: every version of a row has the same
LINK_ALL = 10_000  # with more SHAs than this to relink, one pass over the whole table is cheaper
# Columns derived for the HUD's reads, added after the first version of the table (see UPGRADES).
DERIVED_COLUMNS = [
    """job_sha String MATERIALIZED if(head_sha = '', delivery_id, head_sha)
        COMMENT 'the tested SHA of the job (hud.queries): head_sha, or delivery_id until a SHA is reported'""",
    """outcome_code UInt8 MATERIALIZED multiIf(status != 'completed', 0, conclusion = 'success', 1,
            conclusion IN ('skipped', 'neutral'), 2,
            conclusion = 'failure' AND (ifNull(failed, 0) > 0 OR failed_tests != '[]'), 3,
            conclusion = 'timed_out', 5, 4)
        COMMENT 'hud.store_db.outcome_sql as a number: running, success, skipped, test, infra, infra (timed out);
            after changing it, ALTER TABLE … MATERIALIZE COLUMN outcome_code'""",
    """newer_finished_at Nullable(DateTime64(6, 'UTC'))
        COMMENT 'latest finished_at of the newer attempts of the same job, 1970 if none; NULL until replicate()
            has computed it (the row then counts in no window)'""",
]
JOB_SHA_INDEX = "job_sha_bloom job_sha TYPE bloom_filter GRANULARITY 4"
# The rows of the jobs tested on the SHAs bound as `shas`, for a FINAL read: their sorting keys are found first,
# without FINAL, through the job_sha skip index.
_IN_SHAS = "job_sha IN {shas:Array(String)}"
OF_SHAS = f"{KEY} IN (SELECT {KEY} FROM {TABLE} WHERE {_IN_SHAS}) AND {_IN_SHAS}"

# Sorting key and partition use only columns a JobResult never changes (backend, event type, creation
# time, id): ReplacingMergeTree collapses versions of a row only when they share both. A job's finish time
# moves when it completes, so time-window queries on `finished_at` should also bound `created_at`
# (a job finishes after it is created, give or take the clock of the reporting runner) to prune.
SCHEMA = [
    f"""
    CREATE TABLE IF NOT EXISTS {TABLE} (
        id UInt64,
        backend_id UInt64,
        backend_repo LowCardinality(String) COMMENT 'Backend.repo when the row was last copied',
        backend_level LowCardinality(String) COMMENT 'Backend.level when the row was last copied',
        backend_device LowCardinality(String) COMMENT 'Backend.device when the row was last copied',
        dispatch_id Nullable(UInt64),
        delivery_id String,
        event_type LowCardinality(String),
        upstream_repo LowCardinality(String),
        pr_number Nullable(UInt32),
        head_sha String,
        workflow_name String,
        job_name String,
        run_id String,
        run_attempt UInt32,
        check_run_id String,
        status LowCardinality(String),
        conclusion LowCardinality(String),
        started_at Nullable(DateTime64(6, 'UTC')),
        completed_at Nullable(DateTime64(6, 'UTC')),
        finished_at DateTime64(6, 'UTC') MATERIALIZED coalesce(completed_at, started_at, created_at)
            COMMENT 'JobResult.finished_at; select it by name (SELECT * leaves it out)',
        {", ".join(DERIVED_COLUMNS)},
        queue_time Nullable(Float64),
        execution_time Nullable(Float64),
        passed Nullable(UInt32),
        failed Nullable(UInt32),
        skipped Nullable(UInt32),
        failed_tests String COMMENT 'JSON list, as JobResult.failed_tests',
        artifact_url String,
        run_url String,
        level LowCardinality(String) COMMENT 'Backend level at report time (JobResult.level)',
        upstream_check_run_id Nullable(Int64),
        one_shot Bool,
        relay_decided Bool,
        source LowCardinality(String),
        created_at DateTime64(6, 'UTC'),
        updated_at DateTime64(6, 'UTC'),
        version UInt64 COMMENT 'updated_at in microseconds since the epoch: the newest copy wins',
        is_deleted UInt8 DEFAULT 0 COMMENT '1 on a tombstone for a JobResult deleted in PostgreSQL',
        INDEX finished_at_minmax finished_at TYPE minmax GRANULARITY 4,
        INDEX head_sha_bloom head_sha TYPE bloom_filter GRANULARITY 4,
        INDEX pr_number_bloom pr_number TYPE bloom_filter GRANULARITY 4,
        INDEX {JOB_SHA_INDEX}
    )
    ENGINE = ReplacingMergeTree(version, is_deleted)
    PARTITION BY toYYYYMM(created_at)
    ORDER BY {KEY}
    """,
]
# What tables created before a column or index need: its name and the statement that adds it. Existing rows get the
# derived columns on read until merges store them, and newer_finished_at NULL (pending, see ensure_schema).
UPGRADES = {
    **{column.split()[0]: f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS {column}" for column in DERIVED_COLUMNS},
    "job_sha_bloom": f"ALTER TABLE {TABLE} ADD INDEX IF NOT EXISTS {JOB_SHA_INDEX}",
}

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
    "queue_time": "queue_time",
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
_HEAD_SHA = list(COLUMNS).index("head_sha")
_DELIVERY_ID = list(COLUMNS).index("delivery_id")
_CREATED_AT = list(COLUMNS).index("created_at")


class ClickHouseError(Exception):
    """ClickHouse is not configured, unreachable, or refused a statement."""


def is_configured() -> bool:
    return bool(settings.CLICKHOUSE_URL)


class _Session:
    client: Client | None = None


_session: ContextVar[_Session | None] = ContextVar("clickhouse_session", default=None)


@contextmanager
def session() -> Iterator[None]:
    """One unit of work: every `client()` block inside shares one client, opened by the first and closed at the end.

    Opening costs more than a HUD query (a chdb engine start, or an HTTP handshake), so a HUD request reads
    through one session; it opens nothing until something reads. A session inside a session joins it.
    """
    if _session.get() is not None:
        yield
        return
    shared = _Session()
    token = _session.set(shared)
    try:
        yield
    finally:
        _session.reset(token)
        if shared.client is not None:
            shared.client.close()


@contextmanager
def client() -> Iterator[Client]:
    """A clickhouse-connect client for one unit of work, closed at the end (which frees a chdb directory), or the
    client of the enclosing `session()`.

    Driver errors inside the block come out as ClickHouseError.
    """
    shared = _session.get()
    if shared is not None and shared.client is None:
        shared.client = _connect()
    ch = shared.client if shared is not None else _connect()
    try:
        yield ch
    except DriverError as ex:
        raise ClickHouseError(f"ClickHouse failed: {ex}") from ex
    finally:
        if shared is None:
            ch.close()


def _connect(*, database: str | None = None) -> Client:
    url = settings.CLICKHOUSE_URL
    if not url:
        raise ClickHouseError("CLICKHOUSE_URL is not set")
    parsed = urlparse(url)
    try:
        if parsed.scheme == "chdb":
            return _connect_chdb(parsed.path)
        if parsed.scheme in ("http", "https"):
            return clickhouse_connect.get_client(
                host=parsed.hostname or "localhost",
                port=parsed.port or (8443 if parsed.scheme == "https" else 8123),
                username=unquote(parsed.username or "default"),
                password=unquote(parsed.password or ""),
                database=database or _database(),
                secure=parsed.scheme == "https",
                tz_mode="aware",
            )
    except DriverError as ex:
        raise ClickHouseError(f"Cannot connect to ClickHouse at {_redacted(url)}: {ex}") from ex
    raise ImproperlyConfigured(f"CLICKHOUSE_URL must start with http://, https:// or chdb:///, not {_redacted(url)}")


def _connect_chdb(path: str) -> Client:
    if not path or path == "/":
        raise ImproperlyConfigured(
            "CLICKHOUSE_URL chdb:/// needs an absolute data directory, e.g. chdb:///var/ootci/ch"
        )
    deadline = time.monotonic() + CHDB_BUSY_WAIT
    while True:
        try:
            return clickhouse_connect.get_client(interface="chdb", path=path, tz_mode="aware")
        except DriverError:
            # An existing directory that will not open is almost always held by another process: wait for it.
            if not os.path.isdir(path) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _database() -> str:
    parsed = urlparse(settings.CLICKHOUSE_URL)
    return (parsed.scheme != "chdb" and unquote(parsed.path.strip("/"))) or "default"


def _redacted(url: str) -> str:
    parsed = urlparse(url)
    return parsed._replace(netloc=parsed.netloc.rpartition("@")[2]).geturl()


def ensure_schema() -> None:
    """Create the database and table when missing, add what older tables lack and compute newer_finished_at where it
    is unknown (every row after that column is added; rows of a run that stopped before it computed them); safe to
    run any number of times."""
    database = _database()
    if database != "default":
        bootstrap = _connect(database="default")
        try:
            bootstrap.command(f"CREATE DATABASE IF NOT EXISTS `{database}`")
        except DriverError as ex:
            raise ClickHouseError(f"ClickHouse failed: {ex}") from ex
        finally:
            bootstrap.close()
    with client() as ch:
        _create_table(ch)
        if _pending_shas(ch):
            with _replication_lock(wait=True):  # with the database only then, and again: a run may have linked them
                _link_pending(ch)


def _create_table(ch: Client) -> None:
    for statement in SCHEMA:
        ch.command(statement)
    # Only what is missing: an ALTER, even one with nothing to do, rewrites the table's metadata.
    mine = "WHERE database = currentDatabase() AND table = {table:String}"
    names = f"SELECT name FROM system.columns {mine} UNION ALL SELECT name FROM system.data_skipping_indices {mine}"
    found = {name for (name,) in ch.query(names, parameters={"table": TABLE}).result_rows}
    for name, statement in UPGRADES.items():
        if name not in found:
            ch.command(statement)
    if _is_chdb():
        engine = ch.query(
            "SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = {table:String}",
            parameters={"table": TABLE},
        ).result_rows[0][0]
        wanted = [f"{name} = {value}" for name, value in CHDB_SETTINGS.items()]
        if not all(re.search(rf"\b{setting}\b", engine) for setting in wanted):
            ch.command(f"ALTER TABLE {TABLE} MODIFY SETTING {', '.join(wanted)}")


def _is_chdb() -> bool:
    return urlparse(settings.CLICKHOUSE_URL).scheme == "chdb"


def _remove_leftover_parts(ch: Client, *, more_than: int = 0) -> None:
    """On chdb, with more than ``more_than`` replaced parts still on disk, wait (CHDB_CLEANUP_WAIT at most) while the
    open session deletes them (see CHDB_SETTINGS)."""
    if not _is_chdb():
        return
    sql = (
        "SELECT count() FROM system.parts WHERE database = currentDatabase() AND table = {table:String} AND NOT active"
    )
    deadline = time.monotonic() + CHDB_CLEANUP_WAIT
    while True:
        left = ch.query(sql, parameters={"table": TABLE}).result_rows[0][0]
        if left <= more_than or time.monotonic() > deadline:
            return
        more_than = 0  # once waiting, wait for them all
        time.sleep(0.2)


def _mark_pending(ch: Client, shas: Collection[str]) -> None:
    """Store again, with newer_finished_at unknown, the rows of the jobs tested on ``shas``: the next
    ``_link_pending`` recomputes those jobs, even if this run stops before it."""
    columns = ", ".join(INSERT_COLUMNS)
    sql = f"INSERT INTO {TABLE} ({columns}) SELECT {columns} FROM {TABLE} FINAL WHERE {OF_SHAS}"
    ch.command(sql, parameters={"shas": sorted(shas)})


def _link_pending(ch: Client) -> None:
    """Compute newer_finished_at for every attempt of the jobs on the SHAs of rows stored without it."""
    shas = _pending_shas(ch)
    if shas:
        _link(ch, shas if len(shas) <= LINK_ALL else None)


def _pending_shas(ch: Client) -> list[str]:
    pending = f"SELECT {KEY} FROM {TABLE} WHERE newer_finished_at IS NULL"  # any version: through a small column
    sql = f"SELECT DISTINCT job_sha FROM {TABLE} FINAL WHERE {KEY} IN ({pending}) AND newer_finished_at IS NULL"
    return [sha for (sha,) in ch.query(sql).result_rows]


def _link(ch: Client, shas: Collection[str] | None) -> None:
    """Recompute newer_finished_at for every attempt of the jobs tested on ``shas`` (of every job: None) and store
    again, with the same version, the rows whose value changed (of equal versions the last inserted wins). Other
    jobs on those SHAs come along (a coarser, cheaper condition); their values do not change.

    The running MAX that finds the values sorts only identifying columns; the rows to store again are read back by
    sorting key."""
    where = f"WHERE {OF_SHAS}" if shas is not None else ""
    newer = (
        "max(finished_at) OVER (PARTITION BY backend_id, event_type, job_sha, workflow_name, job_name"
        " ORDER BY created_at DESC, run_attempt DESC, id DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
    )
    changed = f"""
        SELECT backend_id, event_type, created_at, id, newer FROM (
            SELECT backend_id, event_type, created_at, id, newer_finished_at AS stored, {newer} AS newer
            FROM {TABLE} FINAL {where}
        ) WHERE stored IS NULL OR newer != stored"""
    columns = ", ".join(INSERT_COLUMNS)
    ch.command(
        f"""INSERT INTO {TABLE} ({columns}, newer_finished_at)
        SELECT {columns}, linked.newer FROM {TABLE} FINAL
        INNER JOIN ({changed}) AS linked USING (backend_id, event_type, created_at, id) {where}""",
        parameters={"shas": sorted(shas)} if shas is not None else None,
    )


def select(sql: str, parameters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run one SELECT and return its rows as dicts.

    Bind values with `%(name)s` (or ClickHouse's `{name:Type}`). Read the table as
    `oot_workflow_job FINAL` so each job appears once, in its latest version, deleted ones left out.
    DateTime64 columns come back as timezone-aware UTC datetimes.
    """
    with client() as ch:
        return list(ch.query(sql, parameters=parameters).named_results())


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
            with client() as ch:
                while True:
                    rows = _read_batch(after=after, limit=batch_size)
                    if not rows:
                        break
                    moved = _moved_from(ch, rows)
                    if moved:
                        _mark_pending(ch, moved)
                    ch.insert(TABLE, rows, column_names=INSERT_COLUMNS)  # newer_finished_at NULL: pending
                    last = rows[-1]
                    after = (last[_UPDATED_AT], last[0])
                    cursor.advance(updated_at=after[0], row_id=after[1], rows=len(rows))
                    sent += len(rows)
                    if on_batch:
                        on_batch(len(rows))
                    if len(rows) < batch_size:
                        break
                _link_pending(ch)
                _remove_leftover_parts(ch, more_than=CHDB_LEFTOVER_PARTS)
        except ClickHouseError as ex:
            cursor.fail(error=str(ex), at=timezone.now())
            raise
        cursor.finish(reread_from=started - OVERLAP, at=timezone.now())
        return sent


def _moved_from(ch: Client, rows: list[list[Any]]) -> set[str]:
    """The tested SHAs that rows leave (as stored in ClickHouse now): a late-reported head SHA moves a row from the
    job of its delivery to another, and the attempts left behind may be latest again."""
    sql = (
        f"SELECT id, job_sha FROM {TABLE} WHERE id IN {{ids:Array(UInt64)}}"
        " AND created_at BETWEEN {first:DateTime64(6, 'UTC')} AND {last:DateTime64(6, 'UTC')}"
    )
    created = [row[_CREATED_AT] for row in rows]
    parameters = {"ids": [row[0] for row in rows], "first": min(created), "last": max(created)}
    sha = {row[0]: row[_HEAD_SHA] or row[_DELIVERY_ID] for row in rows}
    return {stored for row_id, stored in ch.query(sql, parameters=parameters).result_rows if stored != sha[row_id]}


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
    with _replication_lock(wait=True), client() as ch:  # relinking must not race a replication run
        stored = ch.query(f"SELECT id, backend_id, event_type, created_at, job_sha FROM {TABLE} FINAL").result_rows
        known = set(JobResult.objects.values_list("id", flat=True))
        gone = [row for row in stored if row[0] not in known]
        if gone:
            _mark_pending(ch, {row[4] for row in gone})  # older attempts of their jobs may be latest now
            version = _micros(timezone.now())
            tombstones = [[*row[:4], _EPOCH, version, 1] for row in gone]  # never pending
            columns = ["id", "backend_id", "event_type", "created_at", "newer_finished_at", "version", "is_deleted"]
            ch.insert(TABLE, tombstones, column_names=columns)
            _link_pending(ch)
    return len(gone)


def optimize() -> None:
    """Merge each partition into one part of latest versions (``OPTIMIZE … FINAL``), so that FINAL reads have nothing
    left to merge. After a backfill: its thousands of inserts leave many parts, and chdb merges in the background
    only while a process holds the directory. Rewrites the table: minutes on a server for tens of millions of rows.
    On chdb, waits until the replaced parts are deleted, which later (short) units of work would not do."""
    with client() as ch:
        ch.command(f"OPTIMIZE TABLE {TABLE} FINAL")
        _remove_leftover_parts(ch)


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
