"""The daily roll-up the database keeps (``ootci_jobday``, migration ootci 0040) gives the daily figures the latest
attempts give: on random histories written by every path (single and bulk inserts, updates of finish time, job and
order, deletes), the database store's daily figures of windows starting at a UTC midnight (read from the roll-up)
equal those counted from the latest attempts the sort picks (tests/hud/stores/test_newer_finish.py), and the roll-up
equals a recount from the job results."""

from collections import Counter
from datetime import UTC, datetime, time, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from hud.stores.base import collect
from hud.stores.db.jobs import DatabaseStore
from ootci.models import JobResult
from tests.hud.builders import job
from tests.hud.stores.test_newer_finish import histories, latest_by_sort

pytestmark = pytest.mark.django_db
RECOUNT = """
    SELECT backend_id, event_type, CAST((finished_at AT TIME ZONE 'UTC') AS date) AS day,
           CAST((newer_finished_at AT TIME ZONE 'UTC') AS date) AS newer_day,
           SUM(CASE WHEN outcome = 'success' THEN 1 ELSE 0 END),
           SUM(CASE WHEN outcome IN ('success', 'test', 'infra') THEN 1 ELSE 0 END), COUNT(*)
    FROM ootci_jobresult
    WHERE finished_at IS NOT NULL AND (newer_finished_at IS NULL
          OR CAST((newer_finished_at AT TIME ZONE 'UTC') AS date) < CAST((finished_at AT TIME ZONE 'UTC') AS date))
    GROUP BY 1, 2, 3, 4"""


def kept() -> set[tuple]:
    with connection.cursor() as db:
        db.execute("SELECT backend_id, event_type, day, newer_day, ok, total, seen FROM ootci_jobday WHERE seen <> 0")
        return set(db.fetchall())


def recounted() -> set[tuple]:
    with connection.cursor() as db:
        db.execute(RECOUNT)
        return set(db.fetchall())


def daily_by_sort(event: str, since: datetime, backend_id: int | None = None) -> dict:
    """Per backend with a latest attempt the sort picks (counted or not: a skipped run alone lists its backend),
    (day, ok, total) of its days with a counted one, as ``hud.stores.base.daily_from`` shows them."""
    latest = JobResult.objects.filter(pk__in=latest_by_sort(event, since))
    if backend_id is not None:
        latest = latest.filter(backend_id=backend_id)
    ok, total = Counter(), Counter()
    for j in latest:
        key = (j.backend_id, j.finished_at.astimezone(UTC).date())
        total[key] += j.outcome in ("success", "test", "infra")
        ok[key] += j.outcome == "success"
    found: dict[int, list] = {}
    for bid, day in sorted(total):
        days = found.setdefault(bid, [])
        if total[bid, day]:
            days.append((day, ok[bid, day], total[bid, day]))
    return found


def daily_kept(event: str, since: datetime, backend_id: int | None = None) -> dict:
    rows = DatabaseStore().figure_rows(windows={"w": (event, since)}, asks=[("daily", "w")], backend_id=backend_id)
    found = collect([("daily", "w")], rows)["daily", "w"]
    return {bid: [(r.day, r.successes, r.total) for r in points] for bid, points in found.items()}


@pytest.mark.parametrize("seed", range(4))
def test_the_roll_up_gives_the_daily_figures_of_the_latest_attempts(seed):
    backends = histories(seed)

    assert kept() == recounted()
    today = datetime.combine(timezone.now().astimezone(UTC).date(), time.min, tzinfo=UTC)
    for days in (1, 3, 7, 14):
        since = today - timedelta(days=days - 1)
        for event in ("pull_request", "nightly"):
            assert daily_kept(event, since) == daily_by_sort(event, since)
            bid = backends[seed % 2].pk
            assert daily_kept(event, since, bid) == daily_by_sort(event, since, bid)


def test_a_window_not_starting_at_midnight_is_counted_from_the_latest_attempts():
    histories(7)
    since = timezone.now() - timedelta(days=3)

    assert daily_kept("pull_request", since) == daily_by_sort("pull_request", since)


@pytest.mark.django_db(transaction=True)
def test_a_truncate_of_the_job_results_empties_the_roll_up():
    histories(1)
    assert kept()

    with connection.cursor() as db:
        db.execute("TRUNCATE ootci_jobresult CASCADE")

    assert kept() == set()


def test_a_backend_whose_only_attempt_is_not_counted_is_listed_as_the_rows_list_it(make_backend):
    backend = make_backend("org/skipped", "L2")
    job(backend, name="build", conclusion="skipped", event_type="nightly", finished=timezone.now())
    today = datetime.combine(timezone.now().astimezone(UTC).date(), time.min, tzinfo=UTC)

    assert daily_kept("nightly", today) == daily_by_sort("nightly", today) == {backend.pk: []}  # the roll-up
    assert daily_kept("nightly", today + timedelta(microseconds=1)) == {backend.pk: []}  # the rows' query
