"""The failing-tests view (backend page ?view=failing-tests, its API, the PR page) with 1,000,000 test cases in
PostgreSQL and 10,000,000 in ClickHouse (chdb):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ootci_ftbench \\
        .venv/bin/pytest -s -p no:xdist -p no:cacheprovider tests/bench/bench_failing_tests.py

The history: 12 backends each run every one of NIGHTLIES nightly commits (6 hours apart) and PRS pull requests
(each based on the nightly before it), as 4 shard jobs of 1,250 of 5,000 upstream tests each, so every job has 1,250
cases and every test one result per run on each backend. Statuses follow fixed rules (a backend always fails the
tests with k % 97 equal to its id % 97; each PR breaks 10; 0.5 % fail at random; some fail 30 % of the time; 0.5 %
pass after a rerun), so a PR head on bench/npu has about 90 failing tests, new, already failing, only here and flaky.
Job results, reports and PRs are inserted by SQL in PostgreSQL; the cases of the newest 800 jobs (1,000,000) go to
PostgreSQL's TestCase by INSERT … SELECT over generate_series, and the cases of all 8,000 jobs (10,000,000) to
`oot_test_case` by INSERT … SELECT over numbers() in chdb. Each figure is the median of BENCH_RUNS requests after one
warm-up, through the Django test client (server time: views, queries, template), figure cache off. On ClickHouse
twice: requests in a row (a request's engine stays open for the next, `clickhouse.CHDB_LINGER`), and the first
request after a pause, which starts the engine on the data directory first ("opening ClickHouse" alone). Target:
under 300 ms. Asserted for the PR page on PostgreSQL and on ClickHouse in a row, merged, cold (its classification
computed in the request), with a margin for the shared machine: under 300 / 0.8 = 375 ms, and 9 of STEADY requests in
10 on PostgreSQL (a median of 5 hides the requests that pay for the garbage collector's full passes); the rest printed.

The failing tests' history (TestRecent, kept at parse time) is seeded as the parses of all 10,000,000 cases would have
left it, and one backend's rows are checked against ClickHouse's cases.
"""

import gc
import os
import statistics
import time

import pytest
from django.db import connection
from pytest_django.fixtures import _set_suffix_to_test_databases

from hud.failing import queries as failing_queries
from hud.stores import allowlisted, fallback
from hud.stores.clickhouse import case_table, copy_cases, copy_jobs
from hud.stores.clickhouse import connection as clickhouse
from ootci.models import Backend, TestCase, TestRecent
from ootci.verdicts import HISTORY
from tests.bench.data import BACKENDS, median_ms
from tests.bench.trees import machine_speed

RUNS = int(os.environ.get("BENCH_RUNS", 5))
STEADY = 20  # requests of the PR page in a row, for its 90th percentile
NIGHTLIES, PRS, SHARDS, PER_JOB = 67, 100, 4, 1250  # 12 × 167 runs × 4 shards = 8,016 jobs of 1,250 cases
PG_JOBS = 800  # the newest jobs' cases in PostgreSQL: 1,000,000
FIRST_PR = 500_000
TARGET_MS = 300
MARGIN = 0.8  # timings on a shared 2-CPU machine vary by about a fifth

# One status rule for both stores (PostgreSQL and ClickHouse read this SQL alike), over k (the test), h (a hash of
# job and test, 0..999), backend_id and pr_number.
HASH = "(job_id * 7919 + k * 104729) % 1000"
STATUS = """CASE WHEN k % 97 = backend_id % 97 THEN 'failed'
    WHEN pr_number IS NOT NULL AND (k + pr_number) % 499 = 0 THEN 'failed'
    WHEN k % 211 = 0 AND h < 300 THEN 'failed'
    WHEN h < 5 THEN 'failed' WHEN h = 5 THEN 'error'
    WHEN h >= 900 AND h < 920 THEN 'skipped'
    ELSE 'passed' END"""
RERUNS = "CASE WHEN h >= 995 THEN 1 ELSE 0 END"


@pytest.fixture(scope="session")
def django_db_modify_db_settings():
    _set_suffix_to_test_databases("ftbench")


def seed_jobs() -> None:
    """Backends, PRs (with the delivery naming each one's base commit), job results and their parsed reports."""
    for repo, level, device in BACKENDS:
        Backend.objects.create(repo=repo, level=level, device=device)
    runs = f"""
        SELECT 'nightly' AS event, NULL::int AS pr, substr(md5('n' || i) || md5('x' || i), 1, 40) AS sha,
               now() - make_interval(hours => ({NIGHTLIES} - i) * 6) AS fin, i AS run_no
        FROM generate_series(0, {NIGHTLIES - 1}) AS i
        UNION ALL
        SELECT 'pull_request', {FIRST_PR} + p, substr(md5('pr' || p) || md5('y' || p), 1, 40),
               now() - make_interval(hours => ({NIGHTLIES} - (p * {NIGHTLIES} / {PRS})) * 6) + interval '3 hours',
               {NIGHTLIES} + p
        FROM generate_series(0, {PRS - 1}) AS p"""
    with connection.cursor() as db:
        db.execute(f"""
            INSERT INTO ootci_pullrequest (upstream_repo, number, title, author, head_sha, head_ref, labels, state,
                                           html_url, created_at, updated_at)
            SELECT 'pytorch/pytorch', pr, 'Bench PR ' || pr, 'author', sha, 'b', '[]', 'open', '', fin, fin
            FROM ({runs}) AS r WHERE pr IS NOT NULL""")
        db.execute(f"""
            INSERT INTO ootci_delivery (delivery_id, event, action, upstream_repo, head_sha, ref, payload,
                                        received_at, archive_key, pull_request_id, pending)
            SELECT 'bench-d-' || r.pr, 'pull_request', 'synchronize', 'pytorch/pytorch', r.sha, '',
                   jsonb_build_object('pull_request', jsonb_build_object('number', r.pr, 'base', jsonb_build_object(
                       'sha', substr(md5('n' || ((r.pr - {FIRST_PR}) * {NIGHTLIES} / {PRS}))
                                     || md5('x' || ((r.pr - {FIRST_PR}) * {NIGHTLIES} / {PRS})), 1, 40)))),
                   r.fin - interval '2 hours', '', pr.id, false
            FROM ({runs}) AS r JOIN ootci_pullrequest pr ON pr.number = r.pr""")
        db.execute(f"""
            INSERT INTO ootci_jobresult
                (backend_id, delivery_id, event_type, upstream_repo, pr_number, head_sha, workflow_name, job_name,
                 run_id, run_attempt, check_run_id, status, conclusion, started_at, completed_at, queue_time,
                 execution_time, passed, failed, skipped, failed_tests, artifact_url, run_url, level,
                 upstream_check_run_id, one_shot, relay_decided, source, failure_class, verdict, sha_check,
                 auto_retry_note, environment, created_at, updated_at)
            SELECT b.id, CASE WHEN r.pr IS NULL THEN r.sha ELSE 'bench-d-' || r.pr END, r.event, 'pytorch/pytorch',
                   r.pr, r.sha, 'ci', 'test-' || s, r.run_no || '-' || b.id, 1, '', 'completed', 'failure',
                   r.fin + s * interval '1 minute' - interval '30 minutes', r.fin + s * interval '1 minute',
                   10, 1800, 1100, 10, 20, '[]', '', 'https://github.com/' || b.repo || '/actions/runs/' || r.run_no,
                   b.level, NULL, r.pr IS NULL, false, 'callback', 'test', '', '', '', '{{}}',
                   r.fin + s * interval '1 minute' - interval '30 minutes', r.fin + s * interval '1 minute'
            FROM ootci_backend b CROSS JOIN ({runs}) AS r CROSS JOIN generate_series(0, {SHARDS - 1}) AS s""")
        db.execute(f"""
            INSERT INTO ootci_testreport (job_id, source, artifact_id, artifact_name, digest, size, content_type,
                content_encoding, store_key, state, reason, cases, passed, failed, errors, skipped, xfailed,
                xpassed, reruns, duration, received_at, parsed_at, replaced)
            SELECT id, 'upload', NULL, '', md5(id::text), 1000, '', '', '', 'parsed', '', {PER_JOB}, 1100, 10, 0,
                   20, 0, 0, 5, 125, completed_at, completed_at, false
            FROM ootci_jobresult""")


def seed_database_cases() -> int:
    """The cases of the newest PG_JOBS jobs, in report order (case ids follow the ordinal, as the parser writes)."""
    with connection.cursor() as db:
        db.execute(f"""
            INSERT INTO ootci_testcase (report_id, job_id, file, classname, name, test_id, status, duration, reruns,
                                        message)
            SELECT report_id, job_id, 'test_ops.py', 'test_ops.TestOps', 'test_' || k,
                   'test_ops.py::TestOps::test_' || k, status, 0.1, reruns,
                   CASE WHEN status IN ('failed', 'error') THEN 'AssertionError: bench' ELSE '' END
            FROM (
                SELECT *, {STATUS} AS status, {RERUNS} AS reruns
                FROM (
                    SELECT r.id AS report_id, j.id AS job_id, j.backend_id, j.pr_number, c,
                           c * {SHARDS} + substr(j.job_name, 6)::int AS k,
                           (j.id * 7919 + (c * {SHARDS} + substr(j.job_name, 6)::int) * 104729) % 1000 AS h
                    FROM (SELECT * FROM ootci_jobresult ORDER BY finished_at DESC, id DESC LIMIT {PG_JOBS}) AS j
                    JOIN ootci_testreport r ON r.job_id = j.id
                    CROSS JOIN generate_series(0, {PER_JOB - 1}) AS c
                ) AS drawn
            ) AS cased
            ORDER BY job_id, c""")
        # As autovacuum leaves an insert-only table: its visibility map set, so that index-only scans read no rows
        # (VACUUM needs autocommit: the test runs outside a transaction).
        db.execute("VACUUM ANALYZE")
    return TestCase.objects.count()


def seed_recent() -> int:
    """The failing tests' history (TestRecent) as the parses of every job's report would have left it: per backend and
    test, its newest HISTORY counted results in the backend's nightly runs, over all 8,016 jobs (the 10,000,000 cases,
    not only PostgreSQL's 1,000,000), by the same status rule."""
    counted = "('passed', 'failed', 'error', 'xpass')"
    with connection.cursor() as db:
        db.execute(f"""
            INSERT INTO ootci_testrecent (backend_id, test_id, results)
            SELECT backend_id, 'test_ops.py::TestOps::test_' || k,
                   jsonb_agg(jsonb_build_array((extract(epoch FROM at) * 1000000)::bigint, report_id, c, status,
                                               reruns, job_id, job_sha) ORDER BY n)
            FROM (
                SELECT *, row_number() OVER (PARTITION BY backend_id, k ORDER BY at DESC, report_id DESC, c DESC) AS n
                FROM (
                    SELECT *, {STATUS} AS status, {RERUNS} AS reruns
                    FROM (
                        SELECT j.id AS job_id, j.backend_id, j.pr_number, j.job_sha, r.id AS report_id,
                               r.received_at AS at, c, c * {SHARDS} + substr(j.job_name, 6)::int AS k,
                               (j.id * 7919 + (c * {SHARDS} + substr(j.job_name, 6)::int) * 104729) % 1000 AS h
                        FROM ootci_jobresult j JOIN ootci_testreport r ON r.job_id = j.id
                        CROSS JOIN generate_series(0, {PER_JOB - 1}) AS c
                        WHERE j.event_type = 'nightly'
                    ) AS drawn
                ) AS cased
                WHERE status IN {counted}
            ) AS ranked
            WHERE n <= {HISTORY}
            GROUP BY backend_id, k""")
        db.execute("ANALYZE ootci_testrecent")
    return TestRecent.objects.count()


def recent_matches_clickhouse(backend_id: int, test_ids: list[str]) -> int:
    """Check the seeded history against ClickHouse's cases of those tests on the backend (the newest HISTORY counted
    nightly results of each); returns the results compared."""
    sql = f"""SELECT generic_id, groupArray({HISTORY})(tuple(job_id, status)) AS results FROM (
        SELECT generic_id, job_id, status FROM {copy_cases.TABLE}
        WHERE backend_id = {{backend:UInt64}} AND generic_id IN {{tests:Array(String)}} AND event_type = 'nightly'
              AND status IN ('passed', 'failed', 'error', 'xpass')
        ORDER BY generic_id, reported_at DESC, report_id DESC, ordinal DESC) GROUP BY generic_id"""
    with clickhouse.session():
        found = {
            r["generic_id"]: [(int(j), st) for j, st in r["results"]]
            for r in clickhouse.select(sql, {"backend": backend_id, "tests": test_ids})
        }
    held = dict(
        TestRecent.objects.filter(backend_id=backend_id, test_id__in=test_ids).values_list("test_id", "results")
    )
    assert {t: [(e[5], e[3]) for e in results] for t, results in held.items()} == found
    return sum(len(v) for v in found.values())


def seed_clickhouse_cases() -> int:
    """Every job's cases in `oot_test_case`, made inside ClickHouse from a small table of the jobs (and the job results
    copied as the replication does)."""
    with connection.cursor() as db:
        db.execute("""
            SELECT j.id, j.backend_id, b.repo, j.event_type, j.pr_number, j.job_sha, j.job_name, r.id, r.received_at,
                   substr(j.job_name, 6)::int
            FROM ootci_jobresult j JOIN ootci_backend b ON b.id = j.backend_id
            JOIN ootci_testreport r ON r.job_id = j.id""")
        jobs = db.fetchall()
    copy_jobs.replicate()  # the job results too: the PR page reads them from ClickHouse
    with clickhouse.session():
        case_table.ensure_schema()
        clickhouse.command("DROP TABLE IF EXISTS bench_jobs")
        clickhouse.command("""CREATE TABLE bench_jobs (job_id UInt64, backend_id UInt64, backend_repo String,
            event_type String, pr_number Nullable(UInt32), job_sha String, job_name String, report_id UInt64,
            reported_at DateTime64(6, 'UTC'), shard UInt32) ENGINE = Memory""")
        names = ["job_id", "backend_id", "backend_repo", "event_type", "pr_number", "job_sha", "job_name"]
        clickhouse.insert(
            [list(j) for j in jobs], column_names=[*names, "report_id", "reported_at", "shard"], table="bench_jobs"
        )
        clickhouse.command(f"""
            INSERT INTO {copy_cases.TABLE} ({", ".join(copy_cases.COLUMNS)})
            SELECT 'test_ops.py::TestOps::test_' || toString(k), backend_id, reported_at, report_id, c, backend_repo,
                   job_id, event_type, pr_number, job_sha, 'ci', job_name, 'test_ops.py', 'test_ops.TestOps',
                   'test_' || toString(k), status, 0.1, reruns,
                   if(status IN ('failed', 'error'), 'AssertionError: bench', ''), 1
            FROM (
                SELECT *, {STATUS} AS status, {RERUNS} AS reruns
                FROM (SELECT *, c * {SHARDS} + shard AS k, {HASH} AS h
                      FROM bench_jobs CROSS JOIN (SELECT toUInt64(number) AS c FROM numbers({PER_JOB})) AS n)
            )""")
        clickhouse.command("DROP TABLE bench_jobs")
        return clickhouse.select(f"SELECT count() AS n FROM {copy_cases.TABLE}")[0]["n"]


def parts() -> int:
    sql = f"SELECT count() AS n FROM system.parts WHERE table = '{copy_cases.TABLE}' AND active"
    with clickhouse.session():
        return clickhouse.select(sql)[0]["n"]


def measure(client, settings, pages: dict[str, str], url: str, label: str) -> dict[str, float]:
    """Each page's median server time on ClickHouse (``url``) and on PostgreSQL. On ClickHouse twice: as requests
    follow each other (the engine kept open between them, ``clickhouse.CHDB_LINGER``) and as the first request after
    a pause (the engine started again). Returns each page's times: ClickHouse in a row, after a pause, PostgreSQL."""
    found = {}
    print(f"{label}\n{'request':<26} {'ClickHouse':>11} {'(first after a pause)':>22} {'PostgreSQL':>11}")
    print(f"{'(opening ClickHouse)':<26} {'':>11} {median_ms(engine_open, RUNS):20.1f}ms {'':>11}")
    for name, path in pages.items():
        timings = []
        for store_url in (url, ""):
            settings.CLICKHOUSE_URL = store_url
            response = client.get(path)
            assert response.status_code == 200, path
            assert b"Analytics store unavailable" not in response.content, path  # ClickHouse answered
            timings.append(median_ms(lambda path=path: client.get(path), RUNS))
        settings.CLICKHOUSE_URL = url
        timings.insert(1, median_ms(lambda path=path: (clickhouse.release(), client.get(path)), RUNS))
        print(f"{name:<26} {timings[0]:9.1f}ms {timings[1]:20.1f}ms {timings[2]:9.1f}ms")
        found[name] = timings
    clickhouse.release()
    return found


def steady_requests(client, path: str) -> list[float]:
    """STEADY requests of ``path`` one after the other (PostgreSQL), each with the garbage collector's passes it paid
    for: a median of 5 hides the requests that pay for a full pass. Prints their median, 90th percentile and slowest,
    and the collector's time per request; returns the times, fastest first."""
    spent, passes, started = [0.0], [0, 0, 0], [0.0]

    def timed(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            spent[0] += time.perf_counter() - started[0]
            passes[info["generation"]] += 1

    client.get(path)
    gc.callbacks.append(timed)
    try:
        timings = []
        for _ in range(STEADY):
            began = time.perf_counter()
            client.get(path)
            timings.append((time.perf_counter() - began) * 1000)
    finally:
        gc.callbacks.remove(timed)
    print(
        f"PR page (12 backends), {STEADY} requests in a row on PostgreSQL: median {statistics.median(timings):.1f} ms,"
        f" 90th percentile {sorted(timings)[int(STEADY * 0.9) - 1]:.1f} ms, slowest {max(timings):.1f} ms;"
        f" garbage collector {1000 * spent[0] / STEADY:.1f} ms per request, passes by generation {passes}"
    )
    return sorted(timings)


def engine_open() -> None:
    """What every request on ClickHouse pays first: a session opened (chdb: the engine started on the data directory)
    and one statement."""
    with clickhouse.session():
        clickhouse.select("SELECT 1")


@pytest.mark.django_db(transaction=True)
def test_the_failing_tests_view_with_millions_of_cases(client, settings, tmp_path):
    settings.HUD_CACHE_SECONDS = 0
    url = f"chdb://{tmp_path / 'clickhouse'}"
    began = time.perf_counter()
    seed_jobs()
    in_database = seed_database_cases()
    print(f"\nPostgreSQL: {in_database:,} test cases (and 8,016 jobs, reports) in {time.perf_counter() - began:.1f} s")
    settings.CLICKHOUSE_URL = url
    began = time.perf_counter()
    in_clickhouse = seed_clickhouse_cases()
    print(f"ClickHouse (chdb): {in_clickhouse:,} test cases in {time.perf_counter() - began:.1f} s")
    began = time.perf_counter()
    recent = seed_recent()
    print(
        f"TestRecent (the failing tests' history): {recent:,} (backend, test) rows "
        f"in {time.perf_counter() - began:.1f} s"
    )

    newest_pr = FIRST_PR + PRS - 1
    npu = allowlisted.backend("bench/npu")
    pages = {
        f"view, PR #{newest_pr}": f"/oot/bench/npu/?view=failing-tests&pr={newest_pr}",
        "view, latest nightly": "/oot/bench/npu/?view=failing-tests",
        "API, PR": f"/api/oot/bench/npu/failing-tests/?pr={newest_pr}",
        "PR page (12 backends)": f"/oot/pr/{newest_pr}/",
    }
    print(f"load average before the requests: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"machine speed: {machine_speed():.0f} ms of CPU for tests/bench/trees.machine_speed's work (more is slower)")
    measure(client, settings, pages, url, f"ClickHouse as inserted: {parts()} parts")
    began = time.perf_counter()
    with clickhouse.session():
        clickhouse.command(f"OPTIMIZE TABLE {copy_cases.TABLE} FINAL")
    print(f"OPTIMIZE FINAL in {time.perf_counter() - began:.1f} s")
    merged = measure(client, settings, pages, url, f"ClickHouse merged: {parts()} part")
    settings.CLICKHOUSE_URL = ""
    pr_page = pages["PR page (12 backends)"]
    steady = steady_requests(client, pr_page)
    settings.CLICKHOUSE_URL = url
    settings.HUD_CACHE_SECONDS = 180
    for store_url, label in ((url, "ClickHouse"), ("", "PostgreSQL")):
        settings.CLICKHOUSE_URL = store_url
        cached = median_ms(lambda: client.get(pages["PR page (12 backends)"]), RUNS)
        print(f"PR page (12 backends), its classification cached (HUD_CACHE_SECONDS), {label}: {cached:.1f} ms")
    settings.HUD_CACHE_SECONDS = 0
    found = {}
    for store_url in (url, ""):
        settings.CLICKHOUSE_URL = store_url
        with fallback.unit_of_work():
            found[store_url] = failing_queries.failing_tests(npu, pr=newest_pr)
            assert fallback.fallback_reason() == ""
    npu_failing = [t.test_id for t in found[""].tests]
    settings.CLICKHOUSE_URL = url
    print(f"TestRecent checked against ClickHouse's cases: {recent_matches_clickhouse(npu.id, npu_failing)} results")
    for store_url, label in ((url, "ClickHouse"), ("", "PostgreSQL")):
        f = found[store_url]
        depth = max(t.results for t in f.tests)
        print(
            f"{label}: {f.total} failing tests on the PR head: {f.new} new, {f.already_failing} already failing, "
            f"{f.only_here} only here, {f.flaky} flaky; baseline {f.baseline.rule} {f.baseline.sha[:7]}; "
            f"history read per test: {depth}"
        )
    print(f"target: under {TARGET_MS} ms server time per request")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    in_a_row, _, on_database = merged["PR page (12 backends)"]
    assert on_database < TARGET_MS / MARGIN
    assert in_a_row < TARGET_MS / MARGIN
    assert steady[int(len(steady) * 0.9) - 1] < TARGET_MS / MARGIN  # 9 requests in 10, the collector's passes included
