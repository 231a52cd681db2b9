"""The table of every test case in ClickHouse (`oot_test_case`): its definition, read by the test search and test page
(``hud.stores.clickhouse.history``), filled by ``hud.stores.clickhouse.copy_cases``; and the search's daily roll-up of
it (`oot_test_day`), kept by the same copy.

The roll-up holds, per test and UTC day of arrival, what the search shows of a test (its last failure and last run,
its counted runs and failures) over the cases read ``FINAL``, so re-sent and re-parsed copies count once, as in the
search over the cases. A MergeTree materialized view would add up every copy, so the copy recomputes a day instead:
after each batch of cases it sends (and after deleting a re-parsed report's old cases), it replaces the rows of the
days that batch touched by a fresh aggregate of those days (``copy_cases.days_refresh``), versioned by the server's
clock when the aggregate began. The newest version of a day is therefore the aggregate that began last, which saw
every batch sent before it began; a batch sent after it is followed by its own refresh. A table created before the
roll-up gets it filled from every case when the copy first finds it missing (``copy_cases.schema_ensure``).
"""

from hud.stores.clickhouse import connection as clickhouse

TABLE = "oot_test_case"
# The test search (hud.stores.clickhouse.history) looks for text inside generic ids: an n-gram bloom filter per 8
# granules lets it skip the granules that cannot hold the text (the table is sorted by id, so a granule holds few ids).
SEARCH_INDEX_NAME = "generic_id_ngrams"
SEARCH_INDEX = f"INDEX {SEARCH_INDEX_NAME} lowerUTF8(generic_id) TYPE ngrambf_v1(3, 8192, 2, 0) GRANULARITY 8"
# Measured on the 10-million-case bench (README): the one-backend history read 94 -> 60 ms; 1,024-row granules alone
# gained little, as a narrow column's 64 KB compressed block still held 8,192 rows or more.
STORAGE = "index_granularity = 1024, min_compress_block_size = 4096"
# `reported_at` is when the report arrived (TestReport.received_at, after the job finished for a pulled artifact):
# unlike the job's finish time it never changes, so every copy of a case has the same sorting key and collapses.
SCHEMA = f"""
    CREATE TABLE IF NOT EXISTS {TABLE} (
        generic_id String COMMENT 'TestCase.test_id: file::Class::name with the device made generic',
        backend_id UInt64,
        reported_at DateTime64(6, 'UTC') COMMENT 'TestReport.received_at',
        report_id UInt64,
        ordinal UInt32 COMMENT 'position of the case in its report',
        backend_repo LowCardinality(String),
        job_id UInt64,
        event_type LowCardinality(String),
        pr_number Nullable(UInt32),
        job_sha String,
        workflow_name LowCardinality(String),
        job_name LowCardinality(String),
        file LowCardinality(String),
        classname LowCardinality(String),
        name String,
        status LowCardinality(String),
        duration Float64,
        reruns UInt32,
        message String,
        version UInt64 COMMENT 'TestReport.parsed_at in microseconds: the latest parse wins',
        {SEARCH_INDEX}
    )
    ENGINE = ReplacingMergeTree(version)
    PARTITION BY toYYYYMM(reported_at)
    ORDER BY (generic_id, backend_id, reported_at, report_id, ordinal)
    SETTINGS {STORAGE}
"""


DAY_TABLE = "oot_test_day"
DAY_SCHEMA = f"""
    CREATE TABLE IF NOT EXISTS {DAY_TABLE} (
        generic_id String,
        day Date COMMENT 'UTC day of reported_at',
        last_failure Nullable(DateTime64(6, 'UTC')),
        last_run DateTime64(6, 'UTC'),
        runs UInt64 COMMENT 'counted cases (hud.stores.base.CASE_COUNTED)',
        failures UInt64 COMMENT 'failing cases (hud.stores.base.CASE_FAILING)',
        version UInt64 COMMENT 'server time of the aggregate, in microseconds: the newest wins',
        {SEARCH_INDEX}
    )
    ENGINE = ReplacingMergeTree(version)
    ORDER BY (generic_id, day)
    SETTINGS {STORAGE}
"""


def ensure_schema() -> bool:
    """The tables, and the search index on a table created before it (its older parts are read whole until merged,
    or at once after `ALTER TABLE oot_test_case MATERIALIZE INDEX generic_id_ngrams`). True when it made the roll-up
    (``copy_cases.schema_ensure`` then fills it from every case)."""
    clickhouse.command(SCHEMA)
    indexes = "SELECT name FROM system.data_skipping_indices WHERE database = currentDatabase() AND table = {t:String}"
    if SEARCH_INDEX_NAME not in {name for (name,) in clickhouse.rows(indexes, {"t": TABLE})}:
        clickhouse.command(f"ALTER TABLE {TABLE} ADD {SEARCH_INDEX}")
    tables = "SELECT name FROM system.tables WHERE database = currentDatabase() AND name = {t:String}"
    if clickhouse.rows(tables, {"t": DAY_TABLE}):
        return False
    clickhouse.command(DAY_SCHEMA)
    return True
