"""Webhook benchmark: answer latency and fan-out time with 100 backends, the fake GitHub answering in 100 ms.

Run: .venv/bin/pytest -s tests/bench/bench_webhook.py   (prints figures; BENCH_BROKER=orm for the ORM broker in 1)
     BENCH_BASELINE=/path/to/another/checkout ...      (2 before/after, interleaved: baseline, this, baseline, …)

1. Answer latency: 200 signed pull_request deliveries through the Django stack, tasks enqueued to the
   real broker and left there. Target p99 < 30 ms, independent of the number of backends (1 vs 100).
2. Fan-out, in the production shape (the README's: gunicorn -w 3, ``manage.py qcluster`` with Q_WORKERS=2,
   PostgreSQL, Redis; per tree a database of its own, created, migrated and dropped, and REDIS_URL's database,
   flushed): time from the POST to the fake's answer to the last of 100 repository_dispatches, the fake GitHub
   (HTTP/1.1, keep-alive, as GitHub) answering every request in 100 ms. Each round starts the servers afresh and
   posts one delivery with every installation token to mint (cold: 3 GitHub calls per backend), then BENCH_WARM
   deliveries; warm is the median of those that minted no token. Goal (issue #30): warm < 500 ms, asserted on the
   median of BENCH_ROUNDS rounds with a margin of MARGIN for a shared, loaded 2-core machine.
"""

import http.client
import os
import statistics
import subprocess
import time
import uuid
from pathlib import Path

import psycopg
import pytest
import redis
from django_q.brokers import get_broker
from django_q.conf import Conf

from ootci.models import Backend
from relay.github import client as github
from tests.bench.bench_callback import _free_port, _manage, _wait_until_up
from tests.bench.trees import (
    fake_github_app,
    interleaved,
    medians,
    production_environment,
    python_of,
    trees_on_databases,
    worker_command,
)
from tests.fakes.github import FakeGitHub
from tests.relay.conftest import APP_ID, UPSTREAM, fixture_bytes, sign

BACKENDS = 100
LATENCY = 0.1
WEBHOOK_SECRET = "bench-webhook-secret"

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def bench(settings, monkeypatch, app_key):
    broker_kind = os.environ.get("BENCH_BROKER", "redis")
    # Tests run tasks inline; here they go to the broker, as in production.
    monkeypatch.setattr(Conf, "SYNC", False)
    if broker_kind == "orm":
        monkeypatch.setattr(Conf, "ORM", "default")
    fake = FakeGitHub(app_id=APP_ID, public_pem=app_key.public_pem).start()
    fake.latency = LATENCY
    settings.UPSTREAM_REPO = UPSTREAM
    settings.GITHUB_API_URL = fake.url
    settings.GITHUB_APP_ID = str(APP_ID)
    settings.GITHUB_APP_PRIVATE_KEY = app_key.private_pem
    github.tokens_forget()
    get_broker().purge_queue()
    yield fake, broker_kind
    fake.stop()


@pytest.fixture
def app_key():
    from tests.fakes.github import app_key_generate

    return app_key_generate()


def post(client, settings, delivery_id: str):
    body = fixture_bytes("pull_request.opened.payload")
    headers = {
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": delivery_id,
        "X-Hub-Signature-256": sign(body, settings.GITHUB_WEBHOOK_SECRET),
    }
    started = time.perf_counter()
    response = client.post("/github/webhook", data=body, content_type="application/json", headers=headers)
    return response, time.perf_counter() - started


def percentiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100)
    return cuts[49] * 1000, cuts[98] * 1000


def test_webhook_answer_latency(bench, client, settings):
    fake, broker_kind = bench
    Backend.objects.create(repo="org0/backend")
    for i in range(10):  # warm-up
        post(client, settings, f"warm-one-{i}")
    one = [post(client, settings, f"one-{i}")[1] for i in range(200)]
    Backend.objects.bulk_create(Backend(repo=f"org{i}/backend") for i in range(1, BACKENDS))
    for i in range(10):  # warm-up at 100
        post(client, settings, f"warm-{i}")
    many = []
    for i in range(200):
        response, elapsed = post(client, settings, f"many-{i}")
        assert response.status_code == 202 and response.json()["dispatches"] == BACKENDS
        many.append(elapsed)
    get_broker().purge_queue()
    assert not fake.requests, "the answer must not wait for GitHub"
    p50_1, p99_1 = percentiles(one)
    p50, p99 = percentiles(many)
    print(f"\n[bench] webhook answer ({broker_kind} broker), 1 backend:    p50 {p50_1:.1f} ms  p99 {p99_1:.1f} ms")
    print(f"[bench] webhook answer ({broker_kind} broker), {BACKENDS} backends: p50 {p50:.1f} ms  p99 {p99:.1f} ms")
    assert p99 < 30


def test_webhook_to_last_dispatch(fanout_github, fanout_trees):
    """Item 2, in the production shape; per round and tree, a cold delivery then warm ones, interleaved by tree."""
    for _, tree, database in fanout_trees:
        env = _fanout_environment(database, fanout_github)
        _manage(tree, env, "migrate", "--no-input", "-v", "0")
        _manage(tree, env, "shell", "-v", "0", "-c", SEED_BACKENDS.format(count=BACKENDS))
    results = interleaved(
        fanout_trees, FANOUT_ROUNDS, lambda tree, database: _fanout_round(tree, database, fanout_github), _fanout_line
    )
    print(
        f"\nwebhook → last of {BACKENDS} dispatches answered: gunicorn -w 3 + qcluster (Q_WORKERS=2), PostgreSQL, "
        f"Redis, fake GitHub at {LATENCY * 1000:.0f} ms per request (HTTP/1.1); {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.2f}; median of {FANOUT_ROUNDS} rounds, warm = the median of a round's deliveries "
        f"that minted no token"
    )
    for label, rounds in results.items():
        print(f"{label}: " + _fanout_line(medians(rounds)))
    final = results[fanout_trees[-1][0]]
    warm, cold = (medians(final)[key] for key in ("warm", "cold"))
    print(f"goal: warm < {FANOUT_GOAL_MS} ms (asserted < {FANOUT_GOAL_MS / MARGIN:.0f} ms, margin {MARGIN})")
    assert warm < FANOUT_GOAL_MS / MARGIN, final
    assert cold < 3 * FANOUT_GOAL_MS / MARGIN, final  # three GitHub calls per backend: lookup, mint, dispatch


# --- item 2: the production shape --------------------------------------------------------------------------------

FANOUT_REDIS = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/13")
FANOUT_ROUNDS = int(os.environ.get("BENCH_ROUNDS", 5))
FANOUT_WARM = int(os.environ.get("BENCH_WARM", 5))  # warm deliveries per round, after the cold one
FANOUT_GOAL_MS = 500  # issue #30: 100 dispatches at 100 ms each, webhook to the last one, warm tokens
MARGIN = 0.8  # the goal, loosened by 20 % for a shared, loaded 2-core machine
SEED_BACKENDS = """
from ootci.models import Backend
Backend.objects.bulk_create([Backend(repo=f"org{{i}}/backend") for i in range({count})], ignore_conflicts=True)
"""


@pytest.fixture
def fanout_github():
    with fake_github_app(LATENCY) as fake:
        yield fake


@pytest.fixture
def fanout_trees():
    with trees_on_databases("fanout") as made:
        yield made


def _fanout_round(tree: Path, database: str, fake: FakeGitHub) -> dict[str, float]:
    """A fresh gunicorn and qcluster (empty token caches): one delivery with every token to mint, then warm ones."""
    env = _fanout_environment(database, fake)
    redis.Redis.from_url(FANOUT_REDIS).flushdb()
    port = _free_port()
    server = subprocess.Popen(
        [python_of(tree), "-m", "gunicorn", "config.wsgi", "-b", f"127.0.0.1:{port}", "--no-control-socket"]
        + ["--log-level", "warning", "-w", "3"],
        cwd=tree,
        env=env,
    )
    worker = subprocess.Popen(worker_command(tree), cwd=tree, env={**env, "Q_WORKERS": "2"})
    try:
        _wait_until_up(port)
        time.sleep(3)  # the cluster forks its workers and starts polling
        assert worker.poll() is None, "qcluster exited"
        runs = [_fanout_delivery(port, database, fake) for _ in range(1 + FANOUT_WARM)]
    finally:
        for process in (server, worker):
            process.terminate()
        for process in (server, worker):
            process.wait(timeout=60)
    cold, warm = runs[0], [run for run in runs[1:] if not run["mints"]] or runs[1:]
    figures = {"cold": cold["last"]}
    for key in ("answer", "task", "first", "last_arrival", "last"):
        figures[f"warm_{key}"] = statistics.median(run[key] for run in warm)
    figures["warm"] = figures.pop("warm_last")
    figures["warm_count"] = len([run for run in runs[1:] if not run["mints"]])
    return figures


def _fanout_delivery(port: int, database: str, fake: FakeGitHub) -> dict[str, float]:
    """POST one signed pull_request delivery; times (ms from the POST) of the answer, the first dispatch's arrival,
    the last one's arrival and the last one's answer by the fake GitHub."""
    body = fixture_bytes("pull_request.opened.payload")
    delivery_id = f"fan-{uuid.uuid4()}"
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": delivery_id,
        "X-Hub-Signature-256": sign(body, WEBHOOK_SECRET),
    }
    seen = len(fake.requests)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    started, started_wall = time.monotonic(), time.time()
    conn.request("POST", "/github/webhook", body=body, headers=headers)
    response = conn.getresponse()
    answered = time.monotonic()
    assert response.status == 202, response.read()[:300]
    conn.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        made = fake.requests[seen:]
        dispatches = [r for r in made if r.method == "POST" and r.path.endswith("/dispatches")]
        if len(dispatches) >= BACKENDS:
            break
        time.sleep(0.005)
    assert len(dispatches) == BACKENDS, len(dispatches)
    with psycopg.connect(database) as db:  # every row written before the next delivery
        while db.execute(
            "SELECT count(*) FROM ootci_dispatch d JOIN ootci_delivery v ON v.id = d.delivery_id "
            "WHERE v.delivery_id = %s AND d.status = 'pending'",
            [delivery_id],
        ).fetchone()[0]:
            time.sleep(0.02)
        # The fan-out task's start, as the worker stamped it (the cluster saves it once the task has run).
        task_started, wait_until = None, time.monotonic() + 5
        while task_started is None and time.monotonic() < wait_until:
            task_started = db.execute(
                "SELECT extract(epoch FROM started) FROM django_q_task WHERE func = %s AND started >= to_timestamp(%s)",
                ["relay.tasks.delivery_dispatches_send", started_wall],
            ).fetchone()
            time.sleep(0.02)
    time.sleep(0.2)
    return {
        "answer": (answered - started) * 1000,
        "task": (float(task_started[0]) - started_wall) * 1000 if task_started else float("nan"),
        "first": (min(r.at for r in dispatches) - started) * 1000,
        "last_arrival": (max(r.at for r in dispatches) - started) * 1000,
        "last": (max(r.answered for r in dispatches) - started) * 1000,
        "mints": sum(r.path.endswith("/access_tokens") for r in made),
    }


def _fanout_line(f: dict[str, float]) -> str:
    return (
        f"cold {f['cold']:.0f} ms | warm {f['warm']:.0f} ms (answered {f['warm_answer']:.0f}, task starts "
        f"{f['warm_task']:.0f}, first dispatch arrives {f['warm_first']:.0f}, last arrives "
        f"{f['warm_last_arrival']:.0f}; {f['warm_count']:.0f} warm deliveries)"
    )


def _fanout_environment(database: str, fake: FakeGitHub) -> dict[str, str]:
    return {
        **production_environment(database, FANOUT_REDIS, fake, log_level="WARNING", kept=("DISPATCH_CONCURRENCY",)),
        "UPSTREAM_REPO": UPSTREAM,
        "GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET,
    }
