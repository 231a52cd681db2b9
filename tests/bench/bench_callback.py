"""Callback benchmark: throughput, latency and CPU of POST /github/callback in the production shape, worker included.

Run: .venv/bin/pytest -s tests/bench/bench_callback.py        (prints figures)
     BENCH_BASELINE=/path/to/another/checkout ...              (before/after, interleaved: baseline, this, baseline, …)

Per tree, a dedicated PostgreSQL database (created, migrated, dropped) and Redis database 12; gunicorn on 127.0.0.1
with production settings and ``manage.py qcluster`` beside it (the README's production: ``gunicorn -w 3``, qcluster,
PostgreSQL, Redis), trusting the fake OIDC issuer; a fake GitHub answering in 100 ms, as the App's installation on
every backend. One light client process keeps ``BENCH_CLIENTS`` (default 8) connections busy from a thread each (sync
workers close each connection after its answer, as behind a proxy), posting real reporter bodies with a real token
(minted before the clock starts) and callback token: first every job's in_progress, then every job's completed.
Completed as a success (``BENCH_CONCLUSION=success``): the state machine, the run's artifacts looked for, the alert
rules; as a failure (``failure``): also its run attempt's jobs listed on GitHub, its log fetched and classified; the
default runs both, success first. Each backend runs one workflow run of ``BENCH_JOBS`` shards. CPU per callback is
gunicorn's, PostgreSQL's and Redis's during the phase; for completed callbacks the worker's too, until it has done
everything they queued. PostgreSQL's counts its backends that end during the phase (``_DatabaseBackends``).

Goals (issue #30; the reference relay measured on this machine: completed 115/s and 9.7 ms of CPU, in_progress
104/s and 9.6 ms): callbacks/s >= 2.5x the reference's, p99 < 50 ms, CPU <= 0.6x the reference's; a failed job's
completed CPU, which pays for work the reference does not do, to FAILED_JOB_CPU_MS. Asserted with a margin of MARGIN
for a shared, loaded 2-core machine; the median of the rounds is what is asserted.
"""

import http.client
import json
import os
import queue
import socket
import statistics
import subprocess
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest
import redis

from tests.bench.trees import (
    BASELINE,
    ROOT,
    fake_github_app,
    interleaved,
    machine_speed,
    medians,
    production_environment,
    python_of,
    trees_on_databases,
    worker_command,
)
from tests.fakes.github import FakeGitHub
from tests.fakes.oidc import AUDIENCE, FakeOidcIssuer, reporter_body

REDIS = "redis://127.0.0.1:6379/12"
REPOS = int(os.environ.get("BENCH_REPOS", 10))
JOBS_PER_REPO = int(os.environ.get("BENCH_JOBS", 50))  # shards of one workflow run per backend; 2 callbacks each
WORKERS = int(os.environ.get("BENCH_WORKERS", 3))
THREADS = int(os.environ.get("BENCH_THREADS", 1))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", 8))
# The completed callbacks' conclusion: "failure" (the default: each failed job's log fetched and classified, work
# the reference relay does not do) or "success" (the work both relays do: the state machine, the artifacts looked
# for, the alert rules).
CONCLUSIONS = os.environ.get("BENCH_CONCLUSION", "success,failure").split(",")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", 5 if BASELINE else 1))
QUIET = ["--log-level", "warning"]
TICKS = os.sysconf("SC_CLK_TCK")
# The reference relay on this machine (issue #30): callbacks/s and CPU ms per callback.
REFERENCE = {"in_progress": (104, 9.6), "completed": (115, 9.7)}
# A failed job's log on the fake GitHub: a real one from the failure-line corpus (57 KB, an xpu build error).
FAILED_LOG = (ROOT / "tests/relay/reports/failure_logs/tuned/h4_xpu_build_icpx_sycl_undeclared.log").read_bytes()
MARGIN = 0.8  # the goals, loosened by 20 % for a shared machine: throughput x0.8, p99 and CPU /0.8
# A failed job's completed callback also fetches its run attempt's job listing and its log (57 KB here) and classifies
# it, which the reference relay does not do: its CPU is held to this budget (about 21 ms measured), not to the goal.
FAILED_JOB_CPU_MS = 25.0

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
def github():
    with fake_github_app(0.1) as fake:
        yield fake


@pytest.fixture
def trees():
    with trees_on_databases("callbacks") as made:
        yield made


@pytest.mark.parametrize("conclusion", CONCLUSIONS)
def test_callback_throughput_latency_and_cpu(issuer, github, trees, conclusion):
    for _, tree, database in trees:
        _manage(tree, _environment(database, issuer, github), "migrate", "--no-input", "-v", "0")
    results = interleaved(
        trees, ROUNDS, lambda tree, database: _round(tree, database, issuer, github, conclusion), _line
    )
    print(
        f"\ncallbacks: {REPOS} backends x {JOBS_PER_REPO} shards of one run, in_progress then completed "
        f"({conclusion}), {CLIENTS} "
        f"client connections, gunicorn {' '.join(_worker_args())} + qcluster, fake GitHub at 100 ms, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; median of {ROUNDS}; machine speed "
        f"{machine_speed():.0f} ms of CPU for tests/bench/trees.machine_speed's work (more is slower)"
    )
    for label, rounds in results.items():
        print(f"{label}: " + _line(medians(rounds)))
    median = medians(results[trees[-1][0]])
    goals = {phase: (2.5 * rate, 50, 0.6 * cpu) for phase, (rate, cpu) in REFERENCE.items()}
    if conclusion == "failure":  # work the reference relay does not do: the CPU goal is the success path's
        goals["completed"] = (*goals["completed"][:2], FAILED_JOB_CPU_MS)
    for phase, (rate, p99, cpu) in goals.items():
        print(f"goal {phase}: >= {rate:.0f}/s, p99 < {p99} ms, CPU <= {cpu:.2f} ms (margin {MARGIN})")
    for phase, (rate, p99, cpu) in goals.items():
        assert median[f"{phase}_rate"] >= rate * MARGIN, (phase, median)
        assert median[f"{phase}_p99"] < p99 / MARGIN, (phase, median)
        assert median[f"{phase}_cpu"] <= cpu / MARGIN, (phase, median)


def _line(f: dict) -> str:
    return (
        f"in_progress {f['in_progress_rate']:.0f}/s p99 {f['in_progress_p99']:.0f} ms CPU {f['in_progress_cpu']:.2f} ms"
        f" | completed {f['completed_rate']:.0f}/s p99 {f['completed_p99']:.0f} ms CPU {f['completed_cpu']:.2f} ms"
        f" (web {f['web']:.2f}, worker {f['worker']:.2f}, postgres {f['postgres']:.2f}, redis {f['redis']:.2f}),"
        f" GitHub calls per completed job {f['github_calls']:.2f} (artifact listings {f['listings']:.2f})"
    )


def _round(tree: Path, database: str, issuer: FakeOidcIssuer, github: FakeGitHub, conclusion: str) -> dict[str, float]:
    env = _environment(database, issuer, github)
    redis.Redis.from_url(REDIS).flushdb()
    run = uuid.uuid4().hex[:8]
    targets = json.loads(
        _manage(tree, env, "shell", "-v", "0", "-c", SEED.format(repos=REPOS, run=run)).splitlines()[-1]
    )
    warmup_numbers = range(1000, 1000 + 10 * WORKERS * THREADS // REPOS + 1)
    warmup = _jobs(issuer, targets, warmup_numbers, run_base=9_000_000, conclusion=conclusion)
    jobs = _jobs(issuer, targets, range(JOBS_PER_REPO), run_base=7_000_000, conclusion=conclusion)
    if conclusion == "failure":
        _runs_on_github(github, targets, range(1000, 1000 + 10 * WORKERS * THREADS // REPOS + 1), run_base=9_000_000)
        _runs_on_github(github, targets, range(JOBS_PER_REPO), run_base=7_000_000)
    port = _free_port()
    server = subprocess.Popen(
        [
            python_of(tree),
            "-m",
            "gunicorn",
            "config.wsgi",
            "-b",
            f"127.0.0.1:{port}",
            "--no-control-socket",
            *QUIET,
            *_worker_args(),
        ],
        cwd=tree,
        env=env,
    )
    worker = subprocess.Popen(worker_command(tree), cwd=tree, env=env)
    figures: dict[str, float] = {}
    try:
        _wait_until_up(port)
        for phase in (0, 1):
            _load(port, [[job[phase]] for job in warmup])  # warm every worker: imports, JWKS, connections
        _drained(worker.pid)
        calls_before = len(github.requests)
        for phase, name in ((0, "in_progress"), (1, "completed")):
            before = _cpu_seconds(server.pid, worker.pid, database)
            backends = _DatabaseBackends(database.rsplit("/", 1)[1])
            started = time.perf_counter()
            latencies, failures = _load(port, [[job[phase]] for job in jobs])
            elapsed = time.perf_counter() - started
            if phase == 1:
                _drained(worker.pid)  # everything the completed callbacks queued is done
            used = {k: after - before[k] for k, after in _cpu_seconds(server.pid, worker.pid, database).items()}
            used["postgres"] = backends.used()
            assert not failures, failures[:5]
            total = len(latencies)
            figures[f"{name}_rate"] = total / elapsed
            figures[f"{name}_p99"] = statistics.quantiles(latencies, n=100)[98] * 1000
            parts = ("gunicorn", "postgres", "redis") + (("worker",) if phase == 1 else ())
            figures[f"{name}_cpu"] = sum(used[k] for k in parts) / total * 1000
            if phase == 1:
                for key, part in (
                    ("web", "gunicorn"),
                    ("worker", "worker"),
                    ("postgres", "postgres"),
                    ("redis", "redis"),
                ):
                    figures[key] = used[part] / total * 1000
        made = github.requests[calls_before:]
        figures["github_calls"] = len(made) / len(jobs)
        figures["listings"] = sum(r.path.endswith("/artifacts") for r in made) / len(jobs)
    finally:
        for process in (server, worker):
            process.terminate()
        for process in (server, worker):
            process.wait(timeout=60)
    with psycopg.connect(database) as conn:
        done = conn.execute(
            "SELECT count(*) FROM ootci_jobresult WHERE status = 'completed' AND execution_time IS NOT NULL "
            "AND run_id = ANY(%s)",
            [[str(7_000_000 + i) for i in range(REPOS)]],
        ).fetchone()[0]
    assert done >= len(jobs), done  # earlier rounds' jobs of the same runs count too
    return figures


def _drained(worker_pid: int) -> None:
    """Wait until the task queue is empty and the worker has been idle for a second."""
    client = redis.Redis.from_url(REDIS)
    deadline, last, quiet_since = time.monotonic() + 900, -1.0, time.monotonic()
    while time.monotonic() < deadline:
        used = _tree_cpu(worker_pid)
        if used != last or any(client.llen(k) for k in client.keys("django_q:*:q")):
            last, quiet_since = used, time.monotonic()
        elif time.monotonic() - quiet_since > 1.5:
            return
        time.sleep(0.25)
    raise AssertionError("the worker did not finish within 15 minutes")


def _worker_args() -> list[str]:
    if THREADS > 1:
        return ["-w", str(WORKERS), "-k", "gthread", "--threads", str(THREADS)]
    return ["-w", str(WORKERS)]


def _jobs(
    issuer: FakeOidcIssuer, targets: list[dict], numbers: range, *, run_base: int, conclusion: str
) -> list[list[tuple]]:
    """Each job's two requests, ready to send: signing and encoding are the reporter's cost, not the relay's."""
    jobs = []
    for job in numbers:
        for n, target in enumerate(targets):
            token = issuer.token(repository=target["repo"], expires_in=1800)
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
            run_id = str(run_base + n)
            requests = []
            for name in ("pull_request.in_progress", "pull_request.completed.failure"):
                body = reporter_body(
                    name,
                    delivery_id=target["delivery_id"],
                    callback_token=target["callback_token"],
                    job_name=f"shard-{job}",
                    run_id=run_id,
                    check_run_id=str(job),
                    url=f"https://github.com/{target['repo']}/actions/runs/{run_id}",
                )
                if name.startswith("pull_request.completed") and conclusion == "success":
                    body["workflow"].update(
                        conclusion="success", test_results={"passed": 8432, "failed": 0, "skipped": 20}
                    )
                requests.append((json.dumps(body).encode(), headers))
            jobs.append(requests)
    return jobs


def _runs_on_github(github: FakeGitHub, targets: list[dict], numbers: range, *, run_base: int) -> None:
    """Each backend's run as GitHub's job API shows it, every shard failed in its test step, and each shard's log (a
    real build failure, FAILED_LOG): the follow-up lists the run attempt's jobs, fetches the log through its 302 and
    classifies it."""
    for n, target in enumerate(targets):
        shards = []
        for job in numbers:
            job_id = 8_000_000 + len(github.job_logs)
            github.job_logs[job_id] = FAILED_LOG
            steps = [
                {"name": "Set up job", "number": 1, "conclusion": "success"},
                {"name": "Build and test", "number": 2, "conclusion": "failure"},
            ]
            shards.append({"id": job_id, "name": f"shard-{job}", "conclusion": "failure", "steps": steps})
        github.actions_jobs[(target["repo"].lower(), run_base + n, 1)] = shards


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


def _cpu_seconds(server_pid: int, worker_pid: int, database: str) -> dict[str, float]:
    """CPU time so far of gunicorn (master and workers), the qcluster (every process of it), the database's backends,
    Redis, the machine."""
    name = database.rsplit("/", 1)[1]
    postgres = [pid for pid in _pids() if name in _read(f"/proc/{pid}/cmdline").replace("\0", " ")]
    redis_pids = [pid for pid in _pids() if _read(f"/proc/{pid}/comm").strip() == "redis-server"]
    with open("/proc/stat") as f:
        machine = [int(n) / TICKS for n in f.readline().split()[1:]]
    return {
        "gunicorn": _tree_cpu(server_pid),
        "worker": _tree_cpu(worker_pid),
        "postgres": sum(_process_cpu(pid) for pid in postgres),
        "redis": sum(_process_cpu(pid) for pid in redis_pids),
        "machine": sum(machine) - machine[3] - machine[4],  # all but idle and iowait
    }


class _DatabaseBackends:
    """The CPU of a database's PostgreSQL backends from now on, those that end meanwhile included: an ended backend's
    CPU is in no process's count we can read (its parent is the postmaster of every database), and backends end
    within a phase (a recycled qcluster worker's connection, one older than CONN_MAX_AGE). They are read every
    SAMPLE seconds and each one's last reading counts: a backend that ends loses at most its last SAMPLE seconds."""

    SAMPLE = 0.25

    def __init__(self, name: str) -> None:
        self.name = name
        self.start = self._read()
        self.last = dict(self.start)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _read(self) -> dict[int, float]:
        found = (pid for pid in _pids() if self.name in _read(f"/proc/{pid}/cmdline").replace("\0", " "))
        return {pid: _process_cpu(pid) for pid in found}

    def _keep(self, readings: dict[int, float]) -> None:
        for pid, cpu in readings.items():
            self.last[pid] = max(cpu, self.last.get(pid, 0.0))  # an ended process reads 0

    def _run(self) -> None:
        while not self._stop.wait(self.SAMPLE):
            self._keep(self._read())

    def used(self) -> float:
        self._stop.set()
        self._thread.join()
        self._keep(self._read())
        return sum(cpu - self.start.get(pid, 0.0) for pid, cpu in self.last.items())


def _tree(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(int(p) for p in _read(f"/proc/{current}/task/{current}/children").split())
    return found


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _process_cpu(pid: int, *, reaped: bool = False) -> float:
    fields = _read(f"/proc/{pid}/stat").rpartition(")")[2].split()
    if not fields:
        return 0.0
    used = int(fields[11]) + int(fields[12])  # utime, stime
    return (used + int(fields[13]) + int(fields[14]) if reaped else used) / TICKS  # cutime, cstime


def _tree_cpu(pid: int) -> float:
    """The CPU of a process tree, its children that ended included: qcluster replaces each worker process after
    ``recycle`` (500) tasks, and an ended process's CPU is only in its parent's count of reaped children."""
    return sum(_process_cpu(p, reaped=True) for p in _tree(pid))


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:  # the process ended
        return ""


def _environment(database: str, issuer: FakeOidcIssuer, github: FakeGitHub) -> dict[str, str]:
    return {
        **production_environment(database, REDIS, github, log_level="ERROR"),
        "OIDC_ISSUER": issuer.issuer,
        "OIDC_JWKS_URL": issuer.jwks_url,
        "OIDC_AUDIENCE": AUDIENCE,
        "CALLBACK_RATE_LIMIT_PER_MIN": "1000000",  # counted in Redis on every call, never reached
        "TEST_REPORTS_URL": (ROOT / "var" / "bench-callback-reports").as_uri(),
    }


def _manage(tree: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [python_of(tree), "manage.py", *args], cwd=tree, env=env, capture_output=True, text=True, check=False
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
