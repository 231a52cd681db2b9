"""Bench data: a large, realistic, deterministic set of job results, generated inside PostgreSQL.

`seed_job_results(1_000_000)` takes about ten minutes: the rows are made by INSERT … SELECT over generate_series
(no Python objects), CHUNK rows at a time, with the shapes the HUD cares about: 12 backends across levels,
70% PR jobs over 20,000 PRs with up to three head SHAs each, push and nightly/periodic jobs on hourly
commits, 97% completed with a realistic mix of conclusions, queue/execution times and test counts, spread
over `days` before now. `updated_at` is the last write time (completion, else start), so the rows look
like history rather than a burst of writes. Reused by the query benchmarks.
"""

import statistics
import time
from dataclasses import dataclass

from django.db import connection

from ootci.models import Backend, JobResult, PullRequest

BACKENDS = [
    ("bench/npu", "L4", "npu"),
    ("bench/xpu", "L4", "xpu"),
    ("bench/mps", "L3", "mps"),
    ("bench/rvv", "L3", "rvv"),
    ("bench/rocm", "L3", "rocm"),
    ("bench/tpu", "L2", "tpu"),
    ("bench/gaudi", "L2", "hpu"),
    ("bench/mlu", "L2", "mlu"),
    ("bench/dcu", "L2", "dcu"),
    ("bench/musa", "L2", "musa"),
    ("bench/ipu", "L1", "ipu"),
    ("bench/vpu", "L1", "vpu"),
]
PRS = 20_000
FIRST_PR = 100_000
# Rows per INSERT. The roll-up triggers (migrations ootci 0040-0045) read the job results and their own tables by the
# transition table's keys; on tables whose statistics say they are empty the planner picks scans that make one
# statement of 1,000,000 rows quadratic (20,000 rows took 9 s, 40,000 54 s). Each chunk is followed by ANALYZE.
CHUNK = 10_000
# The job results and the roll-ups their triggers keep (migrations ootci 0040-0045).
JOB_TABLES = (
    "ootci_jobresult",
    "ootci_jobday",
    "ootci_jobtime",
    "ootci_jobpr",
    "ootci_jobprday",
    "ootci_jobrun",
    "ootci_jobrunday",
)


@dataclass(frozen=True)
class Seeded:
    backends: list[Backend]
    job_results: int
    pull_requests: int


def seed_job_results(rows: int = 1_000_000, *, days: int = 90, seed: float = 0.42, spread: int = 0) -> Seeded:
    """Add `rows` job results (and their backends and PRs) to the current database (PostgreSQL only), spread over
    BACKENDS, or over `spread` backends, L2 ones made up beside BACKENDS (a later UPDATE of the rows' backend fired
    the roll-up triggers for each of a million rows: more than 9 minutes)."""
    made = list(BACKENDS) + [(f"bench/extra-{i}", "L2", f"x{i}") for i in range(max(0, spread - len(BACKENDS)))]
    backends = [Backend.objects.create(repo=repo, level=level, device=device) for repo, level, device in made]
    with connection.cursor() as db:
        if not JobResult.objects.exists():
            # The suite's flush between transactional tests deletes rows (tests/postgresql/base.py): after another
            # benchmark's 1,000,000 the tables hold their dead rows, which every trigger's index read of the seed
            # steps over (100,000 rows took 351 s instead of 25). Empty tables are truncated: new files, no dead rows.
            db.execute(f"TRUNCATE {', '.join(JOB_TABLES)} CASCADE")
        db.execute("SELECT setseed(%s)", [seed])
        db.execute(_PULL_REQUESTS, {"first": FIRST_PR, "count": PRS, "days": days})
        db.execute("ANALYZE ootci_pullrequest")
        shape = {
            "days": days,
            "ids": [b.pk for b in backends],
            "levels": [b.level for b in backends],
            "repos": [b.repo for b in backends],
            "first_pr": FIRST_PR,
            "prs": PRS,
        }
        started = time.monotonic()
        for first in range(1, rows + 1, CHUNK):
            db.execute(_JOB_RESULTS, shape | {"first": first, "last": min(first + CHUNK - 1, rows)})
            db.execute("ANALYZE")
            if first // CHUNK % 10 == 9:
                print(f"seeded {first + CHUNK - 1:,} of {rows:,} job results in {time.monotonic() - started:.0f} s")
    return Seeded(backends=backends, job_results=JobResult.objects.count(), pull_requests=PullRequest.objects.count())


_PULL_REQUESTS = """
INSERT INTO ootci_pullrequest
    (upstream_repo, number, title, author, head_sha, head_ref, labels, state, html_url, created_at, updated_at)
SELECT 'pytorch/pytorch', n, 'Bench PR ' || n, 'author' || (n %% 500),
       substr(md5(n::text || '-2') || md5(n::text), 1, 40), 'branch-' || n,
       CASE WHEN n %% 3 = 0 THEN '["ciflow/oot/mps"]'::jsonb ELSE '[]'::jsonb END,
       CASE WHEN n %% 10 < 7 THEN 'open' WHEN n %% 10 < 9 THEN 'merged' ELSE 'closed' END,
       'https://github.com/pytorch/pytorch/pull/' || n,
       now() - make_interval(secs => random() * %(days)s * 86400), now()
FROM generate_series(%(first)s, %(first)s + %(count)s - 1) AS n
"""

_JOB_RESULTS = """
INSERT INTO ootci_jobresult
    (backend_id, delivery_id, event_type, upstream_repo, pr_number, head_sha, workflow_name, job_name,
     run_id, run_attempt, check_run_id, status, conclusion, started_at, completed_at, queue_time,
     execution_time, passed, failed, skipped, failed_tests, artifact_url, run_url, level,
     upstream_check_run_id, one_shot, relay_decided, source, failure_class, verdict, sha_check, auto_retry_note,
     environment, created_at, updated_at)
SELECT backend_id, CASE WHEN event_type IN ('nightly', 'periodic') THEN head_sha ELSE md5('d' || head_sha) END,
       event_type, 'pytorch/pytorch', pr_number, head_sha, 'ci', job_name,
       g::text, attempt, (g * 10 + attempt)::text, status, conclusion, started_at, completed_at,
       CASE WHEN event_type IN ('nightly', 'periodic') THEN NULL ELSE queue_time END,
       CASE WHEN status = 'completed' THEN execution_time END,
       CASE WHEN status = 'completed' THEN floor(r_tests * 2000)::int END,
       CASE WHEN conclusion = 'failure' THEN 1 + floor(r_tests * 10)::int WHEN status = 'completed' THEN 0 END,
       CASE WHEN status = 'completed' THEN floor(r_tests * 50)::int END,
       CASE WHEN conclusion = 'failure' THEN jsonb_build_array('test_ops.py::test_' || (g %% 97)) ELSE '[]'::jsonb END,
       '', 'https://github.com/' || repo_path || '/actions/runs/' || g, level,
       CASE WHEN level IN ('L3', 'L4') AND pr_number IS NOT NULL THEN 9000000000 + g END,
       event_type IN ('nightly', 'periodic'), conclusion = 'timed_out', 'callback', '', '', '', '', '{}'::jsonb,
       created_at, coalesce(completed_at, started_at, created_at)
FROM (
    SELECT g, event_type, pr_number, backend_id, level, repo_path, job_name, attempt, status,
           CASE WHEN status = 'completed' THEN outcome ELSE '' END AS conclusion,
           queue_time, execution_time, r_tests, created_at,
           CASE WHEN event_type IN ('nightly', 'periodic') THEN created_at + make_interval(secs => execution_time)
                ELSE created_at + make_interval(secs => queue_time) END AS started_at,
           CASE WHEN status = 'completed'
                THEN created_at + make_interval(secs => queue_time + execution_time) END AS completed_at,
           CASE WHEN pr_number IS NOT NULL
                THEN substr(md5(pr_number::text || '-' || sha_n) || md5(pr_number::text), 1, 40)
                ELSE substr(md5(event_type || floor(extract(epoch FROM created_at) / 3600)::text)
                            || md5('x'), 1, 40) END AS head_sha
    FROM (
        SELECT g, e AS event_type,
               CASE WHEN e = 'pull_request' THEN %(first_pr)s + floor(random() * %(prs)s)::int END AS pr_number,
               (%(ids)s::bigint[])[1 + g %% cardinality(%(ids)s::bigint[])] AS backend_id,
               (%(levels)s::text[])[1 + g %% cardinality(%(ids)s::bigint[])] AS level,
               (%(repos)s::text[])[1 + g %% cardinality(%(ids)s::bigint[])] AS repo_path,
               (ARRAY['build', 'test-ops', 'test-nn', 'test-inductor'])[1 + (g / 13) %% 4] AS job_name,
               CASE WHEN random() < 0.03 THEN 2 ELSE 1 END AS attempt,
               CASE WHEN random() < 0.97 THEN 'completed' ELSE 'in_progress' END AS status,
               CASE WHEN c < 0.82 THEN 'success' WHEN c < 0.93 THEN 'failure' WHEN c < 0.96 THEN 'cancelled'
                    WHEN c < 0.98 THEN 'timed_out' ELSE 'skipped' END AS outcome,
               random() * 600 AS queue_time, 60 + random() * 3600 AS execution_time, random() AS r_tests,
               floor(random() * 3)::int AS sha_n,
               now() - make_interval(secs => random() * %(days)s * 86400) AS created_at
        FROM (
            SELECT g, random() AS c,
                   CASE WHEN r < 0.70 THEN 'pull_request' WHEN r < 0.85 THEN 'push'
                        WHEN r < 0.95 THEN 'nightly' ELSE 'periodic' END AS e
            FROM (SELECT g, random() AS r FROM generate_series(%(first)s, %(last)s) AS g) AS numbered
        ) AS kinds
    ) AS drawn
) AS shaped
"""


def median_ms(call, runs: int) -> float:
    """The median of ``runs`` timed calls of ``call``, in milliseconds, after one untimed warm-up call."""
    call()
    timings = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        timings.append((time.perf_counter() - start) * 1000)
    return statistics.median(timings)
