"""Sick-runner benchmark (issue 29): a planted bad runner (3× its backend's failure rate) is flagged within 24 h of
generated history, and a healthy month flags nothing. The rule is asked as the backend page and the alert ask it
(``ootci.runners.sick_runners`` over PostgreSQL), every simulated hour.

A backend with 8 runners (labels: ``self-hosted``, ``npu`` and a rack of 4), 40 jobs an hour spread over them at
random, each failing with probability 10 %; the bad runner fails 30 %.

1. 20 seeds of 24 h with one bad runner: goal, flagged within 24 h in 20 of 20 (and nothing else flagged).
2. A healthy month (30 days, 28,800 jobs), asked every hour (720 evaluations): goal, 0 flags.
"""

import random
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from ootci import runners
from ootci.models import JobResult

pytestmark = pytest.mark.django_db

RUNNERS = [f"npu-{i:02d}" for i in range(8)]
JOBS_PER_HOUR = 40
RATE = 0.10


def history(backend, *, hours: int, start, rng: random.Random, bad: str | None) -> None:
    rows = []
    for h in range(hours):
        for n in range(JOBS_PER_HOUR):
            runner = rng.choice(RUNNERS)
            failed = rng.random() < (3 * RATE if runner == bad else RATE)
            at = start + timedelta(hours=h, seconds=rng.randint(0, 3599))
            rows.append(
                JobResult(
                    backend=backend,
                    delivery_id="f" * 40,
                    event_type="push",
                    upstream_repo="pytorch/pytorch",
                    head_sha="f" * 40,
                    workflow_name="ci",
                    job_name="test",
                    run_id=f"{h}-{n}",
                    status="completed",
                    conclusion="failure" if failed else "success",
                    failed=1 if failed else 0,
                    started_at=at - timedelta(minutes=30),
                    completed_at=at,
                    created_at=at - timedelta(minutes=30),
                    environment={
                        "runner": runner,
                        "runner_labels": ["self-hosted", "npu", f"rack-{RUNNERS.index(runner) // 4}"],
                    },
                )
            )
    JobResult.objects.bulk_create(rows, batch_size=5000)


def test_a_bad_runner_is_flagged_within_24_hours(make_backend):
    hours_to_flag, false_flags, took = [], 0, []
    for seed in range(20):
        rng = random.Random(2900 + seed)
        backend = make_backend(f"bench/bad{seed}")
        bad = rng.choice(RUNNERS)
        start = timezone.now() - timedelta(days=2)
        history(backend, hours=24, start=start, rng=rng, bad=bad)
        flagged_at = None
        for hour in range(1, 25):
            began = time.perf_counter()
            found = runners.sick_runners([backend.pk], now=start + timedelta(hours=hour)).get(backend.pk, [])
            took.append(time.perf_counter() - began)
            false_flags += sum(s.key != f"runner:{bad}" for s in found)
            if flagged_at is None and any(s.key == f"runner:{bad}" for s in found):
                flagged_at = hour
        hours_to_flag.append(flagged_at)
    flagged = sorted(h for h in hours_to_flag if h is not None)
    print(
        f"\nbad runner (3x of {RATE:.0%}) flagged in {len(flagged)} of 20 seeds; hours of history needed: "
        f"median {flagged[len(flagged) // 2]}, max {flagged[-1]}; other runners or labels flagged: {false_flags}; "
        f"one evaluation: median {1000 * sorted(took)[len(took) // 2]:.1f} ms"
    )
    assert len(flagged) == 20 and flagged[-1] <= 24
    assert false_flags == 0


def test_a_healthy_month_flags_nothing(make_backend):
    rng = random.Random(2929)
    backend = make_backend("bench/healthy")
    start = timezone.now() - timedelta(days=31)
    history(backend, hours=30 * 24, start=start, rng=rng, bad=None)
    flags, evaluations = set(), 0
    for hour in range(24, 30 * 24 + 1):
        evaluations += 1
        for s in runners.sick_runners([backend.pk], now=start + timedelta(hours=hour)).get(backend.pk, []):
            flags.add((hour, s.key))
    print(f"\nhealthy month: {evaluations} evaluations over {30 * 24 * JOBS_PER_HOUR:,} jobs, {len(flags)} flags")
    assert not flags
