"""What a write of a job result costs in PostgreSQL with the statement triggers each database has, timed in-process.

    .venv/bin/python -m tests.bench.trigger_writes ootci_hudbench_1000000_before ootci_hudbench_1000000

On each database given (e.g. the kept databases of tests/bench/bench_hud.py's before/after run, one migrated by the old
tree, one by this one), interleaved over 5 rounds: 1,000 completions (an in_progress PR attempt's UPDATE to completed,
as a callback writes it), 1,000 re-runs (an INSERT of a newer attempt, which supersedes the older one) and 1,000
UPDATEs of a column no roll-up reads, one statement each, each kind in a transaction rolled back. Prints the median
over the rounds of the time per statement, round trip included.
"""

import statistics
import sys
import time

import psycopg

SERVER = "postgresql://postgres@127.0.0.1:5432"
COMPLETE = """UPDATE ootci_jobresult SET status = 'completed', conclusion = 'success', completed_at = now(),
    execution_time = 1234.5, updated_at = now() WHERE id = %s"""
COLUMNS = """backend_id, delivery_id, event_type, upstream_repo, pr_number, head_sha, workflow_name, job_name, run_id,
    run_attempt, check_run_id, status, conclusion, started_at, completed_at, queue_time, execution_time, passed, failed,
    skipped, failed_tests, artifact_url, run_url, level, upstream_check_run_id, one_shot, relay_decided, source,
    failure_class, verdict, sha_check, auto_retry_note, environment, created_at, updated_at"""
RERUN = f"""INSERT INTO ootci_jobresult ({COLUMNS})
    SELECT backend_id, delivery_id, event_type, upstream_repo, pr_number, head_sha, workflow_name, job_name,
           run_id || 'r', run_attempt + 1, check_run_id, 'completed', 'success', now(), now(), 5.0, 60.0, passed,
           failed, skipped, failed_tests, artifact_url, run_url, level, upstream_check_run_id, one_shot, relay_decided,
           source, failure_class, verdict, sha_check, auto_retry_note, environment, now(), now()
    FROM ootci_jobresult WHERE id = %s"""
NOTE = "UPDATE ootci_jobresult SET auto_retry_note = 'x', updated_at = now() WHERE id = %s"
KINDS = {"completion": COMPLETE, "re-run insert": RERUN, "other update": NOTE}


def per_write_ms(database: str) -> dict[str, float]:
    found = {}
    with psycopg.connect(f"{SERVER}/{database}") as conn:
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM ootci_jobresult WHERE status = 'in_progress' AND pr_number IS NOT NULL "
                "ORDER BY id LIMIT 1000"
            )
        ]
        for kind, sql in KINDS.items():
            start = time.perf_counter()
            for pk in ids:
                conn.execute(sql, [pk])
            found[kind] = (time.perf_counter() - start) / len(ids) * 1000
            conn.rollback()
    return found


def main(databases: list[str], rounds: int = 5) -> None:
    found: dict[str, list[dict]] = {db: [] for db in databases}
    for _ in range(rounds):
        for db in databases:
            found[db].append(per_write_ms(db))
    for db, runs in found.items():
        medians = {kind: statistics.median(r[kind] for r in runs) for kind in KINDS}
        print(db, "  ".join(f"{kind} {ms:.3f} ms" for kind, ms in medians.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
