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
"""

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
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
_LOCK_KEY = 7_020_011  # PostgreSQL advisory lock: one replication run at a time
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

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
        INDEX pr_number_bloom pr_number TYPE bloom_filter GRANULARITY 4
    )
    ENGINE = ReplacingMergeTree(version, is_deleted)
    PARTITION BY toYYYYMM(created_at)
    ORDER BY (backend_id, event_type, created_at, id)
    """,
]

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
    """Create the database and table when missing; safe to run any number of times."""
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


def _create_table(ch: Client) -> None:
    for statement in SCHEMA:
        ch.command(statement)


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
                    ch.insert(TABLE, rows, column_names=INSERT_COLUMNS)
                    last = rows[-1]
                    after = (last[_UPDATED_AT], last[0])
                    cursor.advance(updated_at=after[0], row_id=after[1], rows=len(rows))
                    sent += len(rows)
                    if on_batch:
                        on_batch(len(rows))
                    if len(rows) < batch_size:
                        break
        except ClickHouseError as ex:
            cursor.fail(error=str(ex), at=timezone.now())
            raise
        cursor.finish(reread_from=started - OVERLAP, at=timezone.now())
        return sent


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
    with client() as ch:
        stored = ch.query(f"SELECT id, backend_id, event_type, created_at FROM {TABLE} FINAL").result_rows
        known = set(JobResult.objects.values_list("id", flat=True))
        gone = [row for row in stored if row[0] not in known]
        if gone:
            version = _micros(timezone.now())
            tombstones = [[*row, version, 1] for row in gone]
            columns = ["id", "backend_id", "event_type", "created_at", "version", "is_deleted"]
            ch.insert(TABLE, tombstones, column_names=columns)
    return len(gone)


def optimize() -> None:
    """Merge each partition into one part of latest versions (``OPTIMIZE … FINAL``), so that FINAL reads have nothing
    left to merge. After a backfill: its thousands of inserts leave many parts, and chdb merges in the background
    only while a process holds the directory. Rewrites the table: minutes on a server for tens of millions of rows."""
    with client() as ch:
        ch.command(f"OPTIMIZE TABLE {TABLE} FINAL")


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
