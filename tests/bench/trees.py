"""Benchmarks that measure this checkout beside another (``BENCH_BASELINE=<checkout>``), interleaved round by round
(before, after; after, before; …) so that both meet the same load, each tree on a PostgreSQL database of its own."""

import json
import os
import secrets
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from tests.fakes.github import FakeGitHub, app_key_generate

ROOT = Path(__file__).resolve().parents[2]
SERVER = "postgresql://postgres@127.0.0.1:5432"
BASELINE = os.environ.get("BENCH_BASELINE", "")

APP_ID = 4242  # the fake GitHub's App, which every tree's processes are
Tree = tuple[str, Path, str]  # label, checkout, database URL


@contextmanager
def trees_on_databases(kind: str) -> Iterator[list[Tree]]:
    """The trees measured, the baseline's first when there is one, each on a new database (dropped afterwards)."""
    found = ([("before", Path(BASELINE))] if BASELINE else []) + [("after" if BASELINE else "this", ROOT)]
    prefix = os.environ.get("DATABASE_URL", "/ootci").rsplit("/", 1)[1]
    made = [(label, tree, f"{SERVER}/{prefix}_bench_{kind}_{n}") for n, (label, tree) in enumerate(found)]
    _databases(made, create=True)
    try:
        yield made
    finally:
        _databases(made, create=False)


def interleaved(
    trees: list[Tree], rounds: int, run: Callable[[Path, str], dict], line: Callable[[dict], str]
) -> dict[str, list[dict]]:
    """Each tree's figures per round, ``run(checkout, database)`` called tree after tree in every round, the order
    reversed every other round (A B, B A, A B, …), each run once the machine has settled: the tree that ran first
    after a pause measured up to a millisecond less CPU per callback than the same code run second, which met what
    the first left running (its database's autovacuum, its processes' exit)."""
    results: dict[str, list[dict]] = {label: [] for label, _, _ in trees}
    for n in range(rounds):
        for label, tree, database in trees if n % 2 == 0 else trees[::-1]:
            settled()
            speed = machine_speed()
            figures = run(tree, database)
            results[label].append(figures)
            print(f"\n[round {n + 1}, {label}, machine speed {speed:.0f} ms] " + line(figures))
    return results


def settled(idle: float = 0.9, longest: float = 20.0) -> None:
    """Wait until the machine's cores are at least ``idle`` idle over half a second (at most ``longest`` seconds)."""
    deadline = time.monotonic() + longest
    while time.monotonic() < deadline:
        before = _cpu_times()
        time.sleep(0.5)
        after = _cpu_times()
        busy, total = (after[0] - before[0]), (after[1] - before[1])
        if total and 1 - busy / total >= idle:
            return


def _cpu_times() -> tuple[int, int]:
    """The machine's busy and total CPU ticks so far (/proc/stat's first line; idle and iowait are not busy)."""
    with open("/proc/stat") as f:
        ticks = [int(t) for t in f.readline().split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def machine_speed() -> float:
    """Milliseconds of CPU this process takes for a fixed piece of pure-Python work (JSON in and out, a loop; the
    least of three tries, about 0.15 s each): printed beside a benchmark's figures, so that days on machines of
    different speed can be told apart."""
    document = {"jobs": [{"id": n, "name": f"shard-{n}", "steps": list(range(20))} for n in range(2000)]}
    tries = []
    for _ in range(3):
        started = time.process_time()
        for _ in range(10):
            total = sum(job["id"] for job in json.loads(json.dumps(document))["jobs"])
        assert total == sum(range(2000))
        tries.append((time.process_time() - started) * 1000)
    return min(tries)


def medians(rounds: list[dict]) -> dict:
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


@contextmanager
def fake_github_app(latency: float) -> Iterator[FakeGitHub]:
    """A fake GitHub answering in ``latency`` seconds, on which the trees' processes are the App (APP_ID)."""
    key = app_key_generate()
    fake = FakeGitHub(app_id=APP_ID, public_pem=key.public_pem).start()
    fake.latency = latency
    fake.private_pem = key.private_pem
    try:
        yield fake
    finally:
        fake.stop()


def python_of(tree: Path) -> str:
    """The checkout's own interpreter when it has a .venv (a baseline with other requirements runs on its own
    packages), else this one."""
    own = tree / ".venv/bin/python"
    return str(own) if own.exists() else sys.executable


def worker_command(tree: Path) -> list[str]:
    """The task worker as the README's production runs it beside the web: at a lower priority, so a burst of
    follow-up work never takes the cores from the callbacks and webhooks waiting for an answer."""
    return ["nice", "-n", "10", python_of(tree), "manage.py", "qcluster"]


def production_environment(
    database: str, redis_url: str, github: FakeGitHub, *, log_level: str, kept: tuple[str, ...] = ()
) -> dict[str, str]:
    """The environment of a tree's processes (gunicorn, qcluster, manage.py) as the README's production sets it, on
    ``database`` and ``redis_url``, the App on the fake ``github``; ``kept``: variables of ours passed on."""
    passed = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", *kept)}
    return {
        **passed,
        "DJANGO_SETTINGS_MODULE": "tests.bench.production_settings",
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "DJANGO_SECURE_SSL_REDIRECT": "false",
        "DATABASE_URL": database.replace("postgresql://", "postgres://"),
        "REDIS_URL": redis_url,
        "GITHUB_API_URL": github.url,
        "GITHUB_APP_ID": str(APP_ID),
        "GITHUB_APP_PRIVATE_KEY": github.private_pem,
        "LOG_LEVEL": log_level,
    }


def _databases(trees: list[Tree], *, create: bool) -> None:
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        for _, _, database in trees:
            name = database.rsplit("/", 1)[1]
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            if create:
                conn.execute(f"CREATE DATABASE {name}")
