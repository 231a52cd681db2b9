"""ClickHouse, the HUD's optional analytics store: the only module that uses clickhouse-connect.

PostgreSQL stays the system of record. Every JobResult is copied to the table `oot_workflow_job`
(ReplacingMergeTree) by `hud.stores.clickhouse.copy_jobs`, with the domain columns `finished_at`, `job_sha` and
`outcome` as PostgreSQL computed them; this module owns the table's schema and the connection, and runs statements for
the replication and the HUD's store (`select`, `rows`, `command`, `insert`).

`settings.CLICKHOUSE_URL` selects the store:

- `http(s)://user:password@host:8123/database` — a ClickHouse server or cluster;
- `chdb:///absolute/path` — the embedded engine (chdb) on a data directory. Only one process can hold a
  directory at a time, so `client()` opens it for one unit of work and closes it at the end; a process
  that finds it held waits a little (`CHDB_BUSY_WAIT`) and then fails. A HUD request's session
  (`session(linger=True)`) leaves its engine open for the next request a moment longer (`CHDB_LINGER`,
  for `CHDB_HOLD` in a row at most), as starting the engine costs more than most HUD queries.
  Deployments with several processes (gunicorn workers, qcluster) use a server.
How the table is read: ``hud.stores.clickhouse.jobs``.
"""

import atexit
import os
import re
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import Any
from urllib.parse import unquote, urlparse

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import Error as DriverError
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

TABLE = "oot_workflow_job"
CHDB_BUSY_WAIT = 10.0
# chdb deletes the parts that merges replaced only in a session open for about cleanup_delay_period (30 s + up to
# 10 s by default), which units of work never are; every open loads the leftovers again (tens of ms per hundred).
# With these settings a session of a second or two cleans up, and a run that finds many leftovers waits for it.
CHDB_SETTINGS = {"cleanup_delay_period": 1, "max_cleanup_delay_period": 1, "cleanup_delay_period_random_add": 0}
CHDB_CLEANUP_WAIT = 5.0
# Starting the chdb engine on a directory costs 50-100 ms, more than most HUD queries; a HUD request's engine stays
# open CHDB_LINGER seconds after it for the next one. Another process (the task worker's replication) waits for the
# directory up to CHDB_BUSY_WAIT, so the engine is kept at most CHDB_HOLD seconds in a row and then let go for
# CHDB_LINGER, which under a steady stream of requests leaves the gaps between requests to the other processes.
CHDB_LINGER = 2.0
CHDB_HOLD = 5.0

KEY = "(backend_id, event_type, created_at, id)"  # the sorting key: every version of a row has the same

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
        finished_at DateTime64(6, 'UTC') COMMENT 'JobResult.finished_at, as PostgreSQL computed it',
        job_sha String COMMENT 'JobResult.job_sha: the tested SHA (head_sha, or delivery_id until one is reported)',
        outcome LowCardinality(String) COMMENT 'JobResult.outcome: success, test, infra, running or skipped',
        newer_finished_at Nullable(DateTime64(6, 'UTC'))
            COMMENT 'latest finished_at of the newer attempts of the same job, 1970 if none; NULL until replication
                has computed it (the row then counts in no window)',
        queue_time Nullable(Float64),
        dependency_wait Nullable(Float64),
        sha_check LowCardinality(String),
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
        INDEX job_sha_bloom job_sha TYPE bloom_filter GRANULARITY 4
    )
    ENGINE = ReplacingMergeTree(version, is_deleted)
    PARTITION BY toYYYYMM(created_at)
    ORDER BY {KEY}
    """,
    # Columns added since the table was first made (rows copied before read NULL and "").
    f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS dependency_wait Nullable(Float64) AFTER queue_time",
    f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS sha_check LowCardinality(String) AFTER dependency_wait",
]
# A table without one of these was created by an older version, whose derived columns ClickHouse computed: it is
# dropped and copied again by `backfill_clickhouse --restart` (its rows cannot be upgraded in place, as PostgreSQL
# computes those columns now).
REQUIRED_COLUMNS = ("finished_at", "job_sha", "outcome", "newer_finished_at")
OUTDATED = (
    f"The ClickHouse table {TABLE} was created by an older version of OOT CI: run "
    "`manage.py backfill_clickhouse --restart`, which creates it again and copies every job result."
)


class ClickHouseError(Exception):
    """ClickHouse is not configured, unreachable, or refused a statement."""


def is_configured() -> bool:
    return bool(settings.CLICKHOUSE_URL)


class _Session:
    client: Client | None = None


_session: ContextVar[_Session | None] = ContextVar("clickhouse_session", default=None)


@contextmanager
def session(*, linger: bool = False) -> Iterator[None]:
    """One unit of work: every `client()` block inside shares one client, opened by the first and closed at the end.

    Opening costs more than a HUD query (a chdb engine start, or an HTTP handshake), so a HUD request reads
    through one session; it opens nothing until something reads. A session inside a session joins it. With
    ``linger`` (HUD requests) a chdb client is kept open for the next session instead (see `_Lingering`).
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
            if linger and is_chdb():
                _lingering.keep(shared.client)
            else:
                _close(shared.client)


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
            _close(ch)


def _close(ch: Client) -> None:
    with suppress(DriverError):  # a chdb directory deleted under its engine: nothing is left to free
        ch.close()


class _Lingering:
    """The chdb client of this process's last HUD session, open for CHDB_LINGER seconds more: the next session takes
    it instead of starting the engine again. Closed by a reaper thread when nobody took it in time, at once by a
    session that needs another directory, and at the end of a session once its engine has been open CHDB_HOLD seconds
    (then nothing is kept for CHDB_LINGER, so that a process waiting for the directory gets it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.client: Client | None = None
        self.path = ""
        self.until = 0.0  # monotonic time the kept client is closed at, unless a session takes it first
        self.resting_until = 0.0
        self.started: weakref.WeakKeyDictionary[Client, float] = weakref.WeakKeyDictionary()
        self.reaper: threading.Thread | None = None

    def take(self, path: str) -> Client | None:
        with self.lock:
            ch, self.client = self.client, None
        if ch is not None and self.path == path:
            return ch
        if ch is not None:
            _close(ch)  # chdb runs one directory per process
        return None

    def keep(self, ch: Client) -> None:
        now = time.monotonic()
        with self.lock:
            started = self.started.setdefault(ch, now)  # its hold counts from its first keep
            if self.client is None and now >= self.resting_until:
                if now - started < CHDB_HOLD:
                    self.client, self.path, self.until = ch, urlparse(settings.CLICKHOUSE_URL).path, now + CHDB_LINGER
                    if self.reaper is None:
                        self.reaper = threading.Thread(target=self.reap, name="chdb-linger", daemon=True)
                        self.reaper.start()
                    return
                self.resting_until = now + CHDB_LINGER
        _close(ch)

    def reap(self) -> None:
        while True:
            with self.lock:
                wait = self.until - time.monotonic()
                if self.client is None or wait <= 0:
                    ch, self.client, self.reaper = self.client, None, None
                    break
            time.sleep(wait)
        if ch is not None:
            _close(ch)

    def expire(self) -> None:
        with self.lock:
            ch, self.client = self.client, None
        if ch is not None:
            _close(ch)


_lingering = _Lingering()


def release() -> None:
    """Close the engine a HUD session left open (``CHDB_LINGER``) now, freeing its chdb directory."""
    _lingering.expire()


atexit.register(release)


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
    if (kept := _lingering.take(path)) is not None:
        return kept
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


def create_schema() -> None:
    """Create the database and table when missing; refuse (ClickHouseError) a table of an older version (OUTDATED).
    Safe to run any number of times."""
    database = _database()
    if database != "default":
        bootstrap = _connect(database="default")
        try:
            bootstrap.command(f"CREATE DATABASE IF NOT EXISTS `{database}`")
        except DriverError as ex:
            raise ClickHouseError(f"ClickHouse failed: {ex}") from ex
        finally:
            bootstrap.close()
    with session():
        for statement in SCHEMA:
            command(statement)
        if not set(REQUIRED_COLUMNS) <= set(columns()):
            raise ClickHouseError(OUTDATED)
        if is_chdb():
            table = "SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = {table:String}"
            engine = rows(table, {"table": TABLE})[0][0]
            wanted = [f"{name} = {value}" for name, value in CHDB_SETTINGS.items()]
            if not all(re.search(rf"\b{setting}\b", engine) for setting in wanted):
                command(f"ALTER TABLE {TABLE} MODIFY SETTING {', '.join(wanted)}")


def columns() -> list[str]:
    """The columns of the table as it is (none when it does not exist)."""
    mine = "WHERE database = currentDatabase() AND table = {table:String}"
    return [name for (name,) in rows(f"SELECT name FROM system.columns {mine}", {"table": TABLE})]


def drop_if_outdated() -> bool:
    """Drop the table if an older version created it (see REQUIRED_COLUMNS); returns whether it did."""
    with session():
        found = columns()
        if found and not set(REQUIRED_COLUMNS) <= set(found):
            command(f"DROP TABLE {TABLE}")
            return True
    return False


def is_chdb() -> bool:
    return urlparse(settings.CLICKHOUSE_URL).scheme == "chdb"


def remove_leftover_parts(*, more_than: int = 0) -> None:
    """On chdb, with more than ``more_than`` replaced parts still on disk, wait (CHDB_CLEANUP_WAIT at most) while the
    open session deletes them (see CHDB_SETTINGS); call it inside that ``session()``."""
    if not is_chdb():
        return
    sql = (
        "SELECT count() FROM system.parts WHERE database = currentDatabase() AND table = {table:String} AND NOT active"
    )
    deadline = time.monotonic() + CHDB_CLEANUP_WAIT
    while True:
        left = rows(sql, {"table": TABLE})[0][0]
        if left <= more_than or time.monotonic() > deadline:
            return
        more_than = 0  # once waiting, wait for them all
        time.sleep(0.2)


def select(sql: str, parameters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run one SELECT and return its rows as dicts.

    Bind values with `%(name)s` (or ClickHouse's `{name:Type}`). Read the table as
    `oot_workflow_job FINAL` so each job appears once, in its latest version, deleted ones left out.
    DateTime64 columns come back as timezone-aware UTC datetimes.
    """
    with client() as ch:
        return list(ch.query(sql, parameters=parameters).named_results())


def rows(sql: str, parameters: dict[str, Any] | None = None) -> list[tuple]:
    """Run one SELECT and return its rows as tuples."""
    with client() as ch:
        return [tuple(row) for row in ch.query(sql, parameters=parameters).result_rows]


def command(sql: str, parameters: dict[str, Any] | None = None) -> None:
    """Run one statement that returns no rows (DDL, INSERT … SELECT, OPTIMIZE)."""
    with client() as ch:
        ch.command(sql, parameters=parameters)


def insert(rows_: list[list[Any]], *, column_names: list[str], table: str = TABLE) -> None:
    """Insert ``rows_`` (values in the order of ``column_names``) into the table (``oot_workflow_job`` unless told)."""
    with client() as ch:
        ch.insert(table, rows_, column_names=column_names)
