"""Governance and on-call benchmarks (figures printed, goals asserted with MARGIN):

- readiness of 100 backends recomputed on 1,000,000 job results in PostgreSQL (goal ≤ 5 s): the one statement of
  ``hud.readiness.figures.figures`` (both windows' latest attempts, gates and end-to-end medians) plus the lost
  dispatches and the verdicts;
- first notification after the triggering callback: a failing L4 job's callback to the live server until its PR
  comment is at the fake GitHub, p95 over ``BENCH_NOTIFY`` callbacks (goal ≤ 60 s). Tasks run inline after the
  callback's commit (Q_SYNC, as an idle worker would pick them at once), so the figure is the work, not queueing.

    .venv/bin/pytest -p no:xdist -s tests/bench/bench_governance.py
"""

import os
import statistics
import time

import pytest
from django.utils import timezone
from pytest_django.fixtures import _set_suffix_to_test_databases

from hud.readiness import figures as readiness
from hud.stores.db.jobs import DatabaseStore
from ootci import governance
from ootci.models import AlertRule, NotificationChannel
from tests.bench.data import seed_job_results
from tests.relay.conftest import app_key, fake_github  # noqa: F401  (fixtures)

ROWS = int(os.environ.get("BENCH_ROWS", 1_000_000))
BACKENDS = 100
RUNS = 3
NOTIFY = int(os.environ.get("BENCH_NOTIFY", 40))
READINESS_GOAL_S, NOTIFY_GOAL_S = 5.0, 60.0
MARGIN = 0.8  # the goals loosened by a fifth for a shared 2-core machine


@pytest.fixture(scope="session")
def django_db_modify_db_settings():
    _set_suffix_to_test_databases("govbench")


@pytest.mark.django_db
def test_readiness_of_100_backends_on_a_million_job_results():
    began = time.perf_counter()
    seeded = seed_job_results(ROWS, days=30, spread=BACKENDS)
    ids = [b.pk for b in seeded.backends]
    print(f"\nseeded {ROWS:,} job results over {BACKENDS} backends in {time.perf_counter() - began:.0f} s")

    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        now = timezone.now()
        figures = readiness.figures(DatabaseStore(), now=now)
        judged = governance.readiness_judged(dict.fromkeys(ids, "L3"), figures, now=now)
        times.append(time.perf_counter() - start)
    assert len(judged) == BACKENDS and len(figures) >= BACKENDS - 2
    print(
        f"readiness of {BACKENDS} backends, {ROWS:,} job results: median {statistics.median(times):.2f} s, "
        f"runs {', '.join(f'{t:.2f}' for t in times)} s (goal ≤ {READINESS_GOAL_S:.0f} s, margin {MARGIN})"
    )
    assert statistics.median(times) <= READINESS_GOAL_S / MARGIN


@pytest.mark.django_db(transaction=True)
def test_first_notification_after_the_triggering_callback(fake_github, downstream, settings):  # noqa: F811
    settings.UPSTREAM_REPO = "pytorch/pytorch"
    AlertRule.objects.get_or_create(kind="pr_test_failure", backend=None, defaults={"threshold": 1})
    latencies = []
    for _ in range(NOTIFY):
        ci = downstream("L4", device="npu")
        NotificationChannel.objects.create(backend=ci.backend, kind="pr_comment")
        body = ci.body("pull_request.completed.failure", ci.dispatch())
        start = time.perf_counter()
        assert ci.post(body).status_code == 200
        # Every backend's CI reports on the same PR, and the PR has one comment with a section per backend: the
        # notification is there when this backend's section is (waiting for a new comment waited forever).
        while not any(ci.repo in comment["body"] for comment in list(fake_github.comments.values())):
            assert time.perf_counter() - start < 120, "no PR comment section for the backend in 120 s"
            time.sleep(0.001)
        latencies.append(time.perf_counter() - start)
    p95 = statistics.quantiles(latencies, n=20)[-1]
    print(
        f"\nfirst notification after the callback, {NOTIFY} callbacks: "
        f"median {statistics.median(latencies) * 1000:.0f} ms, "
        f"p95 {p95 * 1000:.0f} ms (goal ≤ {NOTIFY_GOAL_S:.0f} s, margin {MARGIN})"
    )
    assert p95 <= NOTIFY_GOAL_S / MARGIN
