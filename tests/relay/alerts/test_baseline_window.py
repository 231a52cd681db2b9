"""The baseline rule reads a window of a job's newest runs, not its whole history, and gets the whole history's
answer: random histories (re-runs finishing before or after the first attempt, runs that are not counted, equal
finish times) against the latest attempts of every run."""

import random
from datetime import timedelta

import pytest
from django.db.models import QuerySet

from ootci import baseline
from ootci.models import JobResult
from relay.alerts.incidents import COUNTED, recent_latest_attempts
from tests.hud.builders import ago, job

pytestmark = pytest.mark.django_db

CONCLUSIONS = ["success"] * 5 + ["failure"] * 3 + ["cancelled", "skipped"]


def whole_history(runs: QuerySet, need: int) -> list[JobResult]:
    recent = sorted(baseline.latest_attempts(runs), key=lambda j: (j.finished_at, j.pk), reverse=True)
    counted = [j for j in recent if j.outcome in COUNTED][:need]
    return recent[: recent.index(counted[-1]) + 1] if counted else recent


@pytest.mark.parametrize("seed", range(8))
def test_the_window_gives_the_whole_historys_answer(make_backend, seed):
    rng = random.Random(seed)
    backend = make_backend(f"org/window-{seed}")
    start = ago(days=40)
    count = rng.randint(5, 70)
    quiet = rng.randint(0, count) if seed % 2 else 0  # the newest SHAs' runs all skipped: the window must widen
    for n in range(count):
        sha = f"{n:040x}"
        finished = start + timedelta(hours=n * rng.choice([1, 1, 2]))  # two SHAs may finish at the same time
        for attempt in range(1, rng.choice([2, 2, 2, 3, 4])):
            # A re-run is created later, but may finish before the attempt it replaces, even days before.
            early = timedelta(days=rng.choice([0, 0, 0, 3]), minutes=rng.randint(-50, 50))
            at = finished - early if attempt > 1 else finished
            conclusion = "skipped" if n >= count - quiet else rng.choice(CONCLUSIONS)
            job(
                backend,
                name="test",
                conclusion=conclusion,
                finished=at,
                head_sha=sha,
                run_attempt=attempt,
                created_at=start + timedelta(hours=n, minutes=attempt),
                failed=1 if rng.random() < 0.5 else 0,
            )
    runs = JobResult.objects.filter(backend=backend, job_name="test", status="completed")
    one = runs.first()
    for need in (1, 3, 5, 20):
        found = recent_latest_attempts(one, need)
        expected = whole_history(runs, need)
        assert found[: len(expected)] == expected, (seed, need)
