"""The gate figures of rolling windows from the daily roll-up (migrations ootci 0040 and 0042, ``hud.stores.db.rollup``)
are the ones the latest attempts give: on random histories written by every path (inserts, updates of finish time,
job, order, times and conclusions, deletes), the roll-up equals a recount from the job results, and the database
store's gate figures of windows starting anywhere in a day (just before and after an attempt's newer attempts'
finish, where the window's first day decides) equal those counted from the latest attempts the sort picks: counts
exactly, averages within a millionth of a second."""

import importlib
import random
from collections import defaultdict
from datetime import UTC, datetime, time, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from hud.stores.base import COUNTED, OVERRUN_SECONDS
from hud.stores.db import rollup
from hud.stores.db.jobs import DatabaseStore
from hud.stores.db.rollup import ATTEMPT
from ootci.models import JobResult
from tests.hud.stores.test_newer_finish import histories, latest_by_sort

pytestmark = pytest.mark.django_db
COUNTS = ("successes", "test_failures", "infra_failures", "running", "skipped", "timed_out", "overruns")
KEY = "backend_id, event_type, day, newer_day"
RECOUNT = f"""
    SELECT {KEY}, {", ".join(f"SUM({value})" for value in ATTEMPT.values())}
    FROM (SELECT *, CAST((finished_at AT TIME ZONE 'UTC') AS date) AS day,
                 CAST((newer_finished_at AT TIME ZONE 'UTC') AS date) AS newer_day FROM ootci_jobresult) AS rows
    WHERE finished_at IS NOT NULL AND (newer_day IS NULL OR newer_day < day)
    GROUP BY {KEY}"""


def timed_histories(seed: int) -> list:
    """``histories(seed)`` with queue times, dependency waits, run times (some overruns) and conclusions (some
    timeouts) set by bulk updates, then a few more deletes."""
    backends = histories(seed)
    rng = random.Random(seed)
    jobs = list(JobResult.objects.all())
    for j in jobs:
        j.queue_time = None if rng.random() < 0.2 else rng.uniform(0, 3600)
        j.dependency_wait = None if rng.random() < 0.5 else rng.uniform(0, 900)
        j.execution_time = rng.choice([None, rng.uniform(60, 4 * 3600)])
        j.pr_number = rng.choice([None, 1, 2, 3])
        if j.status == "completed":
            j.conclusion = rng.choice(["success", "success", "failure", "timed_out", "cancelled", "skipped"])
    JobResult.objects.bulk_update(jobs, ["queue_time", "dependency_wait", "execution_time", "conclusion", "pr_number"])
    JobResult.objects.filter(pk__in=rng.sample([j.pk for j in jobs], 10)).delete()
    return backends


def kept() -> set[tuple]:
    with connection.cursor() as db:
        db.execute(f"SELECT {KEY}, {', '.join(ATTEMPT)} FROM ootci_jobday WHERE seen <> 0")
        return set(db.fetchall())


def recounted() -> set[tuple]:
    with connection.cursor() as db:
        db.execute(RECOUNT)
        return set(db.fetchall())


def gates_by_sort(event: str, since, backend_id: int | None = None) -> dict[int, dict]:
    """Per backend with a latest attempt the sort picks: the gate counts and averages, counted here."""
    latest = JobResult.objects.filter(pk__in=latest_by_sort(event, since))
    if backend_id is not None:
        latest = latest.filter(backend_id=backend_id)
    found: dict[int, dict] = defaultdict(lambda: dict.fromkeys(COUNTS, 0) | {"queue": [], "dependency": []})
    for j in latest:
        f = found[j.backend_id]
        counted = j.outcome in ("success", "test", "infra")
        f[{"success": "successes", "test": "test_failures", "infra": "infra_failures"}.get(j.outcome, j.outcome)] += 1
        f["timed_out"] += j.outcome == "infra" and j.conclusion == "timed_out"
        f["overruns"] += counted and (j.execution_time or 0) > OVERRUN_SECONDS
        f["queue"] += [j.queue_time] if j.queue_time is not None else []
        f["dependency"] += [j.dependency_wait] if j.dependency_wait is not None else []
    return {bid: figures(f) for bid, f in found.items()}


def figures(f: dict) -> dict:
    average = {name: sum(f[name]) / len(f[name]) if f[name] else None for name in ("queue", "dependency")}
    return {name: f[name] for name in COUNTS} | {"queue_avg": average["queue"], "dependency_avg": average["dependency"]}


def gates_kept(event: str, since, backend_id: int | None = None) -> dict[int, dict]:
    rows = DatabaseStore().figure_rows(windows={"w": (event, since)}, asks=[("gates", "w")], backend_id=backend_id)
    return {r["backend_id"]: {name: r[name] for name in (*COUNTS, "queue_avg", "dependency_avg")} for r in rows}


def assert_same(kept_: dict, by_sort: dict) -> None:
    assert kept_.keys() == by_sort.keys()
    for bid, want in by_sort.items():
        got = kept_[bid]
        assert {n: got[n] for n in COUNTS} == {n: want[n] for n in COUNTS}, bid
        for name in ("queue_avg", "dependency_avg"):
            assert (got[name] is None) == (want[name] is None), (bid, name)
            if want[name] is not None:
                assert abs(got[name] - want[name]) < 1e-6, (bid, name, got[name], want[name])


def starts(rng: random.Random) -> list:
    """Window starts: at random times of day; just after a midnight and on both sides of a noon, where the part of the
    first day read from the job results turns from before the start, subtracted, to after it, added
    (``hud.stores.db.rollup``); and just at and after the newer attempts' finish of attempts that finished later that
    day or on a later day (the first day's third part)."""
    now = timezone.now()
    found = [now - timedelta(days=days, seconds=rng.uniform(0, 86400)) for days in (0, 1, 2, 3, 6)]
    midnight = datetime.combine(now.astimezone(UTC).date() - timedelta(days=rng.randint(1, 4)), time.min, tzinfo=UTC)
    tick = timedelta(microseconds=1)
    found += [midnight + tick, midnight + timedelta(hours=12) - tick, midnight + timedelta(hours=12)]
    with connection.cursor() as db:
        for days in ("<", "="):
            db.execute(
                "SELECT newer_finished_at FROM ootci_jobresult WHERE newer_finished_at < finished_at AND CAST(("
                f"newer_finished_at AT TIME ZONE 'UTC') AS date) {days} CAST((finished_at AT TIME ZONE 'UTC') AS date)"
            )
            newer = [r[0] for r in db.fetchall()]
            for at in rng.sample(newer, min(2, len(newer))):
                found += [at, at + tick]
    return found


@pytest.mark.parametrize("seed", range(4))
def test_the_roll_up_gives_the_gate_figures_of_the_latest_attempts(seed):
    backends = timed_histories(seed)
    rng = random.Random(seed)

    assert kept() == recounted()
    for since in starts(rng):
        for event in ("pull_request", "nightly"):
            assert_same(gates_kept(event, since), gates_by_sort(event, since))
            bid = backends[seed % 2].pk
            assert_same(gates_kept(event, since, bid), gates_by_sort(event, since, bid))


def percentile_of(values: list[float], p: float) -> float | None:
    """``percentile_cont(p)``: the values at ranks ⌊p(n−1)⌋ and ⌈p(n−1)⌉ of the sorted values, interpolated."""
    if not values:
        return None
    ordered = sorted(values)
    at = p * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def stats_by_sort(event: str, since, backend_id: int | None = None) -> dict[int, dict]:
    """The stats the roll-up gives (counts, average queue time) as the gates, and the rest (percentiles as
    ``percentile_cont``, distinct PRs, average run time, last finish) from the latest attempts."""
    gates = gates_by_sort(event, since, backend_id)
    latest = JobResult.objects.filter(pk__in=latest_by_sort(event, since))
    found = {}
    for bid, g in gates.items():
        mine = [j for j in latest if j.backend_id == bid]
        runs = [j.execution_time for j in mine if j.execution_time is not None]
        queues = [j.queue_time for j in mine if j.queue_time is not None]
        found[bid] = {name: g[name] for name in (*COUNTS[:-1], "queue_avg")} | {
            "queue_median": percentile_of(queues, 0.5),
            "queue_p90": percentile_of(queues, 0.9),
            "duration_median": percentile_of(runs, 0.5),
            "prs": len({j.pr_number for j in mine if j.pr_number is not None}),
            "duration_avg": sum(runs) / len(runs) if runs else None,
            "last_run": max(j.finished_at for j in mine),
        }
    return found


def stats_kept(event: str, since, backend_id: int | None = None) -> dict[int, dict]:
    rows = DatabaseStore().figure_rows(windows={"w": (event, since)}, asks=[("stats", "w")], backend_id=backend_id)
    names = (*COUNTS[:-1], "queue_avg", "prs", "duration_avg", "last_run", "queue_median", "queue_p90")
    names += ("duration_median",)
    return {r["backend_id"]: {name: r[name] for name in names} for r in rows}


@pytest.mark.parametrize("seed", range(3))
def test_the_stats_read_their_counts_from_the_roll_up_as_the_latest_attempts_count_them(seed):
    backends = timed_histories(seed)
    rng = random.Random(seed)

    for since in starts(rng):
        for event in ("pull_request", "nightly"):
            for bid in (None, backends[seed % 2].pk):
                kept_, by_sort = stats_kept(event, since, bid), stats_by_sort(event, since, bid)
                assert kept_.keys() == by_sort.keys()
                for b, want in by_sort.items():
                    assert kept_[b].pop("last_run") == want.pop("last_run")
                    assert kept_[b] == pytest.approx(want, abs=1e-6), b


def test_the_histories_reach_every_part_of_a_window():
    """Windows whose first day reads from the job results attempts added and attempts subtracted, and latest attempts
    of the third part: finished later, with newer attempts that finished on the first day before the window (else the
    tests above would not test every part)."""
    timed_histories(2)
    reached = defaultdict(int)
    for since in starts(random.Random(2)):
        edges = rollup.edge_params({"w": ("pull_request", since)})
        with connection.cursor() as db:
            db.execute(
                "SELECT COUNT(*) FROM ootci_jobresult WHERE finished_at >= %(w_lo)s AND finished_at < %(w_hi)s "
                "AND (newer_finished_at IS NULL OR newer_finished_at < %(w_cut)s)",
                edges,
            )
            reached["subtracted" if edges["w_sign"] < 0 else "added"] += db.fetchone()[0]
            db.execute(
                "SELECT COUNT(*) FROM ootci_jobresult WHERE newer_finished_at >= %(w_midnight)s "
                "AND newer_finished_at < %(since)s AND finished_at >= %(w_late)s",
                edges | {"since": since},
            )
            reached["third"] += db.fetchone()[0]
    assert min(reached["subtracted"], reached["added"], reached["third"]) > 0, reached


def test_a_window_reads_the_shorter_part_of_its_first_day():
    """Before its day's noon a window subtracts the attempts from midnight to its start; from noon it adds those from
    its start to the next midnight: never more than half a day of job results."""
    midnight = datetime(2026, 11, 20, tzinfo=UTC)
    for since, sign, read in (
        (midnight, -1, timedelta(0)),
        (midnight + timedelta(hours=3), -1, timedelta(hours=3)),
        (midnight + timedelta(hours=12), 1, timedelta(hours=12)),
        (midnight + timedelta(hours=23), 1, timedelta(hours=1)),
    ):
        edges = rollup.edge_params({"w": ("pull_request", since)})
        assert (edges["w_sign"], edges["w_hi"] - edges["w_lo"]) == (sign, read), since
        assert edges["w_whole"] == (midnight if sign < 0 else midnight + timedelta(days=1)).date()


def test_the_migration_counts_overruns_as_the_gates_do():
    migration = importlib.import_module("ootci.migrations.0042_jobday_gates")
    latest = importlib.import_module("ootci.migrations.0043_jobday_times")

    assert migration.OVERRUN_SECONDS == OVERRUN_SECONDS
    assert latest.COLUMNS == ATTEMPT
    assert migration.COUNTED == COUNTED == rollup.COUNTED
    assert rollup.OVERRUN_SECONDS == OVERRUN_SECONDS
