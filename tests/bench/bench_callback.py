"""Callback benchmark: sustained throughput and latency of POST /github/callback under gunicorn.

Run: .venv/bin/pytest -s tests/bench/bench_callback.py        (prints figures)

A dedicated PostgreSQL database (created, migrated, seeded, dropped) and Redis database 12; gunicorn on
127.0.0.1 with production settings, trusting the fake OIDC issuer, which serves its key set from this
process. Gunicorn runs the production shape from the README: ``BENCH_WORKERS`` sync workers (default 3, cores
+ 1), or gthread workers of ``BENCH_THREADS`` threads with HTTP keep-alive when that is over 1. One light client
process keeps ``BENCH_CLIENTS`` (default 8) connections busy from a thread each (sync workers close each
connection after its answer, as behind a proxy), posting real reporter bodies — in_progress then completed for
every job — with a real token (minted once per job before the clock starts, as GitHub mints one per job step)
and callback token, and times every answer. Every callback goes the whole way: JWT verification, allowlist,
Redis rate limit, dispatch lookup, state-machine write in PostgreSQL.

Target on 2 cores (gunicorn, PostgreSQL, Redis and the client share them): ≥ 300 callbacks/s, p99 < 50 ms.
The CPU each party used during the run is printed too, with the whole machine's, so that a run slowed by
something else on the machine can be told apart.
"""

import http.client
import json
import os
import queue
import secrets
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.fakes.oidc import AUDIENCE, FakeOidcIssuer, reporter_body

ROOT = Path(__file__).resolve().parents[2]
DATABASE = "ootci_bench_callbacks"
SERVER = "postgresql://postgres@127.0.0.1:5432"
REPOS = int(os.environ.get("BENCH_REPOS", 20))
JOBS_PER_REPO = int(os.environ.get("BENCH_JOBS", 100))  # 2 callbacks each
WORKERS = int(os.environ.get("BENCH_WORKERS", 3))
THREADS = int(os.environ.get("BENCH_THREADS", 1))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", 8))
GUNICORN = str(ROOT / ".venv/bin/gunicorn")
QUIET = ["--log-level", "warning"]
TICKS = os.sysconf("SC_CLK_TCK")

SEED = """
import json
from django.utils import timezone
from ootci.models import Backend, Delivery, Dispatch
from relay.endpoints.tokens import callback_token_issue
out = []
for i in range({repos}):
    backend = Backend.objects.create(repo=f"bench-{run}-{{i}}/pytorch-npu", level="L2")
    delivery = Delivery.objects.create(delivery_id=f"{run}-{{i}}", event="push", upstream_repo="pytorch/pytorch",
                                       head_sha="a" * 40, payload={{}})
    Dispatch.objects.create(delivery=delivery, backend=backend, status="sent", attempts=1, sent_at=timezone.now())
    token = callback_token_issue(delivery_id=delivery.delivery_id, repo=backend.repo)
    out.append({{"repo": backend.repo, "delivery_id": delivery.delivery_id, "callback_token": token}})
print(json.dumps(out))
"""


@pytest.fixture
def issuer():
    fake = FakeOidcIssuer().start()
    yield fake
    fake.stop()


@pytest.fixture
def database():
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    yield f"{SERVER}/{DATABASE}"
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


def test_callback_throughput_and_latency(issuer, database):
    env = _environment(database, issuer)
    _manage(env, "migrate", "--no-input", "-v", "0")
    run = uuid.uuid4().hex[:8]
    targets = json.loads(_manage(env, "shell", "-v", "0", "-c", SEED.format(repos=REPOS, run=run)).splitlines()[-1])
    warmup = _jobs(issuer, targets, range(1000, 1000 + 10 * WORKERS * THREADS // REPOS + 1))
    jobs = _jobs(issuer, targets, range(JOBS_PER_REPO))
    port = _free_port()
    server = subprocess.Popen(
        [GUNICORN, "config.wsgi", "-b", f"127.0.0.1:{port}", "--no-control-socket", *QUIET, *_worker_args()],
        cwd=ROOT,
        env=env,
    )
    try:
        _wait_until_up(port)
        _load(port, warmup)  # warm every worker thread: imports, JWKS, database and Redis connections
        before = _cpu_seconds(server.pid, database)
        started = time.perf_counter()
        latencies, failures = _load(port, jobs)
        elapsed = time.perf_counter() - started
        used = {name: after - before[name] for name, after in _cpu_seconds(server.pid, database).items()}
    finally:
        server.terminate()
        server.wait(timeout=30)

    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE status = 'completed' AND execution_time IS NOT NULL) "
            "FROM ootci_jobresult WHERE run_id::int < 1000"
        ).fetchone()
    total = len(latencies)
    cuts = statistics.quantiles(latencies, n=100)
    idle = used.pop("idle") / elapsed / (os.cpu_count() or 1)
    per_callback = "  ".join(f"{name} {seconds / total * 1000:.2f}" for name, seconds in used.items())
    print(
        f"\ncallbacks: {total} over {elapsed:.1f} s, {CLIENTS} client connections "
        f"({'keep-alive' if THREADS > 1 else 'one per callback'}), gunicorn {' '.join(_worker_args())}, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}\n"
        f"throughput: {total / elapsed:.0f} callbacks/s (target >= 300)\n"
        f"latency ms: p50 {cuts[49] * 1000:.1f}  p90 {cuts[89] * 1000:.1f}  p99 {cuts[98] * 1000:.1f} (target < 50)"
        f"  max {max(latencies) * 1000:.1f}\n"
        f"CPU ms per callback: {per_callback} (machine: every process on the machine), idle {idle:.0%}\n"
        f"jobs stored: {rows[0]}, completed with execution time: {rows[1]}, failed answers: {len(failures)}"
    )
    assert not failures, failures[:5]
    assert rows == (REPOS * JOBS_PER_REPO, REPOS * JOBS_PER_REPO)


def _worker_args() -> list[str]:
    if THREADS > 1:
        return ["-w", str(WORKERS), "-k", "gthread", "--threads", str(THREADS)]
    return ["-w", str(WORKERS)]


def _jobs(issuer: FakeOidcIssuer, targets: list[dict], numbers: range) -> list[list[tuple[bytes, dict]]]:
    """Each job's two requests, ready to send: signing and encoding are the reporter's cost, not the relay's."""
    jobs = []
    for job in numbers:
        for target in targets:
            token = issuer.token(repository=target["repo"], expires_in=900)
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
            requests = []
            for name in ("pull_request.in_progress", "pull_request.completed.failure"):
                body = reporter_body(
                    name,
                    delivery_id=target["delivery_id"],
                    callback_token=target["callback_token"],
                    job_name=f"job-{job}",
                    run_id=str(job),
                    check_run_id=str(job),
                )
                requests.append((json.dumps(body).encode(), headers))
            jobs.append(requests)
    return jobs


def _load(port: int, jobs: list[list[tuple[bytes, dict]]]) -> tuple[list[float], list[str]]:
    todo: queue.SimpleQueue = queue.SimpleQueue()
    for job in jobs:
        todo.put(job)
    latencies: list[float] = []
    failures: list[str] = []
    threads = [threading.Thread(target=_client, args=(port, todo, latencies, failures)) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, failures


def _client(port: int, todo: queue.SimpleQueue, latencies: list[float], failures: list[str]) -> None:
    """One downstream connection: a job's in_progress, then its completed, then the next job."""
    conn = None
    while True:
        try:
            job = todo.get_nowait()
        except queue.Empty:
            break
        for data, headers in job:
            started = time.perf_counter()
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("POST", "/github/callback", body=data, headers=headers)
            response = conn.getresponse()
            answer = response.read()
            if response.will_close:  # sync workers close every connection
                conn.close()
                conn = None
            latencies.append(time.perf_counter() - started)
            if response.status != 200:
                failures.append(f"{response.status} {answer[:200]!r}")
    if conn is not None:
        conn.close()


def _cpu_seconds(server_pid: int, database: str) -> dict[str, float]:
    """CPU time so far of this client, gunicorn (master and workers), the database's backends, Redis, the machine."""
    gunicorn = [server_pid, *_children(server_pid)]
    name = database.rsplit("/", 1)[1]
    postgres = [pid for pid in _pids() if name in _read(f"/proc/{pid}/cmdline").replace("\0", " ")]
    redis = [pid for pid in _pids() if _read(f"/proc/{pid}/comm").strip() == "redis-server"]
    times = os.times()
    with open("/proc/stat") as f:
        machine = [int(n) / TICKS for n in f.readline().split()[1:]]
    return {
        "client": times.user + times.system,
        "gunicorn": sum(_process_cpu(pid) for pid in gunicorn),
        "postgres": sum(_process_cpu(pid) for pid in postgres),
        "redis": sum(_process_cpu(pid) for pid in redis),
        "machine": sum(machine) - machine[3] - machine[4],  # all but idle and iowait
        "idle": machine[3],
    }


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _children(pid: int) -> list[int]:
    return [int(p) for p in _read(f"/proc/{pid}/task/{pid}/children").split()]


def _process_cpu(pid: int) -> float:
    fields = _read(f"/proc/{pid}/stat").rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS if fields else 0.0  # utime, stime


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:  # the process ended
        return ""


def _environment(database: str, issuer: FakeOidcIssuer) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return {
        **keep,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "DJANGO_SECURE_SSL_REDIRECT": "false",
        "DATABASE_URL": database.replace("postgresql://", "postgres://"),
        "REDIS_URL": "redis://127.0.0.1:6379/12",
        "OIDC_ISSUER": issuer.issuer,
        "OIDC_JWKS_URL": issuer.jwks_url,
        "OIDC_AUDIENCE": AUDIENCE,
        "CALLBACK_RATE_LIMIT_PER_MIN": "1000000",  # counted in Redis on every call, never reached
        "LOG_LEVEL": "WARNING",
    }


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(port: int) -> None:
    # GET / is a redirect: a probe that is answered without a warning in the log (GET /github/callback is a 405).
    deadline, status = time.monotonic() + 30, None
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/")
            status = conn.getresponse().status
            conn.close()
            if status == 302:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"gunicorn did not come up (last answer: {status})")
