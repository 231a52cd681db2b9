"""Callback benchmark: sustained throughput and latency of POST /github/callback under gunicorn.

Run: .venv/bin/pytest -s tests/bench/bench_callback.py        (prints figures)

A dedicated PostgreSQL database (created, migrated, seeded, dropped) and Redis database 12; gunicorn
(``BENCH_WORKERS`` sync workers, default 4) on 127.0.0.1 with production settings, trusting the fake
OIDC issuer, which serves its key set from this process. Client processes (``BENCH_CLIENTS``, default
4) each post a bounded stream of real reporter bodies — in_progress then completed for every job — with
a real token and callback token, one request at a time, and time every answer. Every callback goes the
whole way: JWT verification, allowlist, Redis rate limit, dispatch lookup, locked upsert.
Target on 2 cores (gunicorn, PostgreSQL, Redis and the clients share them): ≥ 300 callbacks/s, p99 < 50 ms.
"""

import http.client
import json
import multiprocessing
import os
import secrets
import socket
import statistics
import subprocess
import sys
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
WORKERS = int(os.environ.get("BENCH_WORKERS", 4))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", 4))
GUNICORN = str(ROOT / ".venv/bin/gunicorn")
QUIET = ["--log-level", "warning"]

SEED = """
import json
from django.utils import timezone
from ootci.models import Backend, Delivery, Dispatch
from relay.tokens import callback_token_issue
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
    for target in targets:
        target["token"] = issuer.token(repository=target["repo"], expires_in=900)
    port = _free_port()
    server = subprocess.Popen(
        [GUNICORN, "ootci.wsgi", "-w", str(WORKERS), "-b", f"127.0.0.1:{port}", "--no-control-socket", *QUIET],
        cwd=ROOT,
        env=env,
    )
    try:
        _wait_until_up(port)
        _load(port, targets, jobs=range(1000, 1000 + WORKERS * 5))  # warm every worker: imports, JWKS, connections
        started = time.perf_counter()
        latencies, failures = _load(port, targets, jobs=range(JOBS_PER_REPO))
        elapsed = time.perf_counter() - started
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
    print(
        f"\ncallbacks: {total} over {elapsed:.1f} s with {CLIENTS} clients, gunicorn -w {WORKERS}, "
        f"{os.cpu_count()} cores\n"
        f"throughput: {total / elapsed:.0f} callbacks/s (target >= 300)\n"
        f"latency ms: p50 {cuts[49] * 1000:.1f}  p90 {cuts[89] * 1000:.1f}  p99 {cuts[98] * 1000:.1f} (target < 50)"
        f"  max {max(latencies) * 1000:.1f}\n"
        f"jobs stored: {rows[0]}, completed with execution time: {rows[1]}, failed answers: {len(failures)}"
    )
    assert not failures, failures[:5]
    assert rows == (REPOS * JOBS_PER_REPO, REPOS * JOBS_PER_REPO)


def _load(port: int, targets: list[dict], *, jobs: range) -> tuple[list[float], list[str]]:
    work = [(t, j) for j in jobs for t in targets]
    chunks = [work[i::CLIENTS] for i in range(CLIENTS)]
    with multiprocessing.get_context("fork").Pool(CLIENTS) as pool:
        results = pool.starmap(_client, [(port, chunk) for chunk in chunks])
    return [s for r in results for s in r[0]], [f for r in results for f in r[1]]


def _client(port: int, work: list[tuple[dict, int]]) -> tuple[list[float], list[str]]:
    latencies, failures = [], []
    for target, job in work:
        for name in ("pull_request.in_progress", "pull_request.completed.failure"):
            body = reporter_body(
                name,
                delivery_id=target["delivery_id"],
                callback_token=target["callback_token"],
                job_name=f"job-{job}",
                run_id=str(job),
                check_run_id=str(job),
            )
            data = json.dumps(body).encode()
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {target['token']}"}
            started = time.perf_counter()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("POST", "/github/callback", body=data, headers=headers)
            response = conn.getresponse()
            answer = response.read()
            conn.close()
            latencies.append(time.perf_counter() - started)
            if response.status != 200:
                failures.append(f"{response.status} {answer[:200]!r}")
    return latencies, failures


def _environment(database: str, issuer: FakeOidcIssuer) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return {
        **keep,
        "DJANGO_SETTINGS_MODULE": "ootci.settings",
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
    deadline, status = time.monotonic() + 30, None
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/github/callback")
            status = conn.getresponse().status
            if status == 405:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"gunicorn did not come up (last answer: {status})")
