from datetime import timedelta

import pytest

from hud.figures import pages, queries
from hud.stores import softcache
from hud.stores.types import BackendStats, Counts
from ootci.models import Dispatch
from tests.hud import scenario
from tests.hud.builders import ago, dispatch, job, pull_request
from tests.schedules import schedules_installed

pytestmark = pytest.mark.django_db


def test_it_counts_latest_attempts_and_splits_test_from_infra_failures():
    s = scenario.build()

    stats = queries.backend_stats(days=7, event="pull_request")[s.backend.id]

    assert stats.counts == Counts(
        successes=2, test_failures=1, infra_failures=3, lost=1, running=1, skipped=1, timed_out=1
    )
    assert stats.counts.total == 6
    assert stats.counts.pass_rate == 33.3
    assert stats.counts.timeout_rate == 16.7
    assert stats.prs == 1


def test_it_takes_medians_and_p90_over_latest_attempts():
    s = scenario.build()

    stats = queries.backend_stats(days=7, event="pull_request")[s.backend.id]

    assert (stats.queue_median, stats.queue_p90, stats.queue_avg) == (150.0, 222.0, 150.0)
    assert (stats.duration_median, stats.duration_avg) == (250.0, 250.0)


def test_a_longer_window_reaches_older_jobs():
    s = scenario.build()

    stats = queries.backend_stats(days=30, event="pull_request")[s.backend.id]

    assert (stats.counts.successes, stats.counts.total, stats.counts.pass_rate) == (3, 7, 42.9)
    assert stats.prs == 2


def test_push_and_nightly_results_are_counted_in_their_own_views():
    s = scenario.build()

    push = queries.backend_stats(days=7, event="push")[s.backend.id].counts
    nightly = queries.backend_stats(days=7, event="nightly")[s.backend.id].counts

    assert (push.successes, push.total) == (1, 1)
    assert (nightly.test_failures, nightly.total, nightly.pass_rate) == (1, 1, 0.0)


def test_the_window_boundary_uses_the_completion_time(make_backend):
    backend = make_backend("edge/npu")
    pr = pull_request(7, "9" * 40)
    d = dispatch(backend, sha=pr.head_sha, at=ago(days=8), pr=pr)
    job(backend, name="inside", finished=ago(days=7) + timedelta(minutes=2), dispatch_=d, started_at=ago(days=8))
    job(backend, name="outside", conclusion="failure", finished=ago(days=7) - timedelta(minutes=2), dispatch_=d)

    counts = queries.backend_stats(days=7, event="pull_request")[backend.id].counts

    assert (counts.successes, counts.total) == (1, 1)


def test_a_lost_dispatch_counts_only_after_the_zombie_timeout_and_only_for_l2_and_up(make_backend, settings):
    settings.ZOMBIE_TIMEOUT_HOURS = 6
    shown, listed = make_backend("shown/npu", "L2"), make_backend("listed/npu", "L1")
    for backend in (shown, listed):
        dispatch(backend, sha="1" * 40, at=ago(hours=7))
        dispatch(backend, sha="2" * 40, at=ago(hours=5))
    dispatch(shown, sha="3" * 40, at=ago(hours=9), status="failed")

    stats = queries.backend_stats(days=1, event="pull_request")
    relay = queries.relay_health(days=1)

    assert stats[shown.id].counts.lost == 1
    assert listed.id not in stats
    assert (relay.dispatches_sent, relay.dispatches_failed, relay.dispatches_lost) == (4, 1, 1)


def test_the_relay_strip_counts_dispatches_waiting_for_a_retry(make_backend):
    backend = make_backend("wait/npu", "L2")
    dispatch(backend, sha="1" * 40, at=ago(minutes=5), status="pending")
    waiting = dispatch(backend, sha="2" * 40, at=ago(minutes=5), status="pending")
    Dispatch.objects.filter(pk=waiting.pk).update(retry_at=ago(minutes=-10), last_error="GitHub 502")

    relay = queries.relay_health(days=1)

    assert (relay.dispatches_pending, relay.dispatches_waiting) == (2, 1)


def test_daily_pass_rates_leave_days_without_runs_empty():
    s = scenario.build()

    days = queries.daily_pass_rates(days=14, event="pull_request")[s.backend.id]

    assert len(days) == 14
    assert days[-1].day == ago().date()
    by_day = {d.day: d for d in days}
    two_days_ago = by_day[ago(days=2).date()]
    assert (two_days_ago.successes, two_days_ago.total) == (1, 4)
    assert by_day[ago(days=5).date()].pass_rate is None
    assert sum(d.total for d in days) == 7  # 6 in the 7-day window + the 10-day-old build


def test_the_overview_sorts_worst_first_and_lists_l1(make_backend):
    good, bad = make_backend("good/npu", "L3", device="g"), make_backend("bad/npu", "L3", device="b")
    idle = make_backend("idle/npu", "L3", device="i")
    make_backend("quiet/npu", "L1")
    job(good, name="a", event_type="pull_request", pr_number=1, head_sha="1" * 40)
    job(bad, name="a", conclusion="failure", event_type="pull_request", pr_number=1, head_sha="1" * 40)

    overview = queries.overview(days=7, event="pull_request")

    assert [r.backend.repo for r in overview.sections["L3"]] == ["bad/npu", "good/npu", "idle/npu"]
    assert [b.repo for b in overview.listed] == ["quiet/npu"]
    assert overview.sections["L3"][2].stats == BackendStats()
    assert idle.id


def test_pr_run_time_spans_first_start_to_last_finish_of_latest_attempts(make_backend):
    backend = make_backend("span/npu", "L3", device="s")
    pr = pull_request(5, "5" * 40)
    d = dispatch(backend, sha=pr.head_sha, at=ago(hours=5), pr=pr)
    job(backend, name="a", finished=ago(hours=3), started_at=ago(hours=4), dispatch_=d)
    job(backend, name="b", finished=ago(hours=1), started_at=ago(hours=2), dispatch_=d)

    p90 = pages.pr_run_p90(queries.store(), since=ago(days=7))

    assert p90[backend.id] == pytest.approx(3 * 3600, abs=1)


def a_run_across_a_window_start(backend) -> None:
    """PR 6's run began 9 days ago and ended 6 days ago (its lint job's re-run is running, so lint is left out); PR 7's
    ended 8 days ago."""
    pr = pull_request(6, "6" * 40)
    d = dispatch(backend, sha=pr.head_sha, at=ago(days=10), pr=pr)
    job(backend, name="build", finished=ago(days=8), started_at=ago(days=9), dispatch_=d)
    job(backend, name="test", finished=ago(days=6), started_at=ago(days=7), dispatch_=d)
    job(backend, name="lint", finished=ago(days=1), started_at=ago(days=9, hours=12), dispatch_=d, run_attempt=1)
    job(backend, name="lint", conclusion="", finished=ago(hours=1), dispatch_=d, run_attempt=2, run_id="lint-2")
    old = pull_request(7, "7" * 40)
    job(
        backend,
        name="build",
        finished=ago(days=8),
        dispatch_=dispatch(backend, sha=old.head_sha, at=ago(days=9), pr=old),
    )


def test_a_run_counts_in_a_window_by_its_last_finish_with_its_whole_time(make_backend):
    """A run that began before the window and ended in it took all of it; a job whose re-run is still running is
    left out (its older attempt is no longer its result), and a run that ended before the window is not in it."""
    backend = make_backend("whole/npu", "L3", device="w")
    a_run_across_a_window_start(backend)

    p90 = pages.pr_run_p90(queries.store(), since=ago(days=7))

    assert p90 == {backend.id: pytest.approx(3 * 86400, abs=1)}  # PR 6's whole run; PR 7's ended before
    assert pages.pr_run_p90(queries.store(), since=ago(days=5)) == {}


def test_the_matrix_keys_rows_by_head_sha_and_shows_lost_dispatches():
    s = scenario.build()

    matrix = queries.backend_matrix(backend_id=s.backend.id, days=7, event="pull_request")

    # PR 101's running job reported 1.5 hours ago, after PR 103's dispatch (8 hours ago); PR 102 is too old.
    assert [(r.pr_number, r.lost) for r in matrix.rows] == [(101, 0), (103, 1)]
    cells = matrix.rows[0].cells
    assert matrix.columns == ["ci / build", "ci / docs", "ci / lint", "ci / long", "ci / run", "ci / skip", "ci / test"]
    assert (cells["ci / build"].id, cells["ci / build"].run_attempt) == (s.rerun.id, 2)
    assert cells["ci / test"].outcome == "test"
    assert cells["ci / lint"].outcome == "infra"
    assert cells["ci / run"].outcome == "running"
    assert matrix.rows[0].title == "Fix index_put"


def test_failing_only_keeps_rows_with_a_failure(make_backend):
    backend = make_backend("mixed/npu")
    for n, conclusion in ((1, "success"), (2, "failure")):
        pr = pull_request(n, str(n) * 40)
        job(
            backend,
            name="a",
            conclusion=conclusion,
            dispatch_=dispatch(backend, sha=pr.head_sha, at=ago(hours=2), pr=pr),
        )

    matrix = queries.backend_matrix(backend_id=backend.id, days=7, event="pull_request", failing_only=True)

    assert [r.pr_number for r in matrix.rows] == [2]


def test_the_matrix_pages_fifty_rows(make_backend):
    backend = make_backend("busy/npu")
    for n in range(51):
        job(backend, name="a", event_type="push", head_sha=f"{n:040d}", finished=ago(minutes=n + 1))

    first = queries.backend_matrix(backend_id=backend.id, days=1, event="push")
    second = queries.backend_matrix(backend_id=backend.id, days=1, event="push", page=2)

    assert (len(first.rows), first.has_next, first.rows[0].sha) == (50, True, f"{0:040d}")
    assert (len(second.rows), second.has_next, second.rows[0].sha) == (1, False, f"{50:040d}")


def test_columns_sort_numbers_naturally():
    assert sorted(["ci / shard-10", "ci / shard-2", "ci / build"], key=pages.natural_key) == [
        "ci / build",
        "ci / shard-2",
        "ci / shard-10",
    ]


def test_the_pr_detail_groups_latest_attempts_and_keeps_earlier_ones():
    s = scenario.build()

    pr = queries.pull_request(101)

    (group,) = pr.groups
    assert pr.summary == {"jobs": 7, "passed": 2, "failed": 3, "running": 1, "skipped": 1, "waiting": 0, "lost": 0}
    assert [j.id for j in group.earlier] == [s.first_attempt.id]
    assert group.jobs[0].outcome in ("test", "infra")


def test_a_dispatched_backend_without_reports_is_waiting_then_lost():
    scenario.build()

    assert queries.pull_request(104).groups[0].waiting.state == "waiting"
    assert queries.pull_request(103).groups[0].waiting.state == "lost"
    assert queries.pull_request(999) is None


def test_job_detail_lists_every_attempt_newest_first():
    s = scenario.build()

    detail = queries.job_detail(backend_id=s.backend.id, job_id=s.first_attempt.id)

    assert [a.run_attempt for a in detail.attempts] == [2, 1]
    assert detail.pr_title == "Fix index_put"
    assert queries.job_detail(backend_id=s.backend.id + 1, job_id=s.first_attempt.id) is None


def test_metrics_cover_every_day_of_the_window():
    s = scenario.build()

    (series,) = queries.metrics(days=30, event="pull_request")

    assert series.backend.id == s.backend.id
    assert len(series.days) == 30
    assert sum(d.successes for d in series.days) == 3


def test_figures_are_cached_for_hud_cache_seconds(settings, make_backend, django_assert_num_queries):
    from django.core.cache import cache

    settings.HUD_CACHE_SECONDS = 60
    cache.clear()
    backend = make_backend("cached/npu")
    job(backend, name="a", event_type="push", head_sha="1" * 40)
    first = queries.backend_stats(days=1, event="push")

    job(backend, name="b", conclusion="failure", event_type="push", head_sha="1" * 40)
    with django_assert_num_queries(0):
        assert queries.backend_stats(days=1, event="push") == first
    assert queries.backend_stats(days=1, event="push", now=ago()) != first
    cache.clear()


def a_rerun_that_finished_before_the_first_attempt(backend):
    """A job whose re-run (newer) finished 10 days ago while its first attempt's completion came in 2 days ago: in the
    last 7 days the first attempt is the job's latest attempt there; over 14 days the re-run is."""
    job(
        backend,
        name="slow",
        conclusion="failure",
        event_type="push",
        head_sha="7" * 40,
        created_at=ago(days=12),
        started_at=ago(days=12),
        finished=ago(days=2),
    )
    job(
        backend,
        name="slow",
        event_type="push",
        head_sha="7" * 40,
        run_attempt=2,
        created_at=ago(days=11),
        started_at=ago(days=11),
        finished=ago(days=10),
    )


def test_each_window_of_the_overview_picks_its_own_latest_attempts(make_backend):
    backend = make_backend("windows/npu", "L3")
    a_rerun_that_finished_before_the_first_attempt(backend)

    overview = queries.overview(days=7, event="push")

    row = overview.sections["L3"][0]
    assert (row.stats.counts.successes, row.stats.counts.infra_failures) == (0, 1)  # the first attempt, in the week
    assert [(d.day, d.successes, d.total) for d in row.spark if d.total] == [(ago(days=10).date(), 1, 1)]
    assert row.stats == queries.backend_stats(days=7, event="push")[backend.id]
    assert row.spark == queries.daily_pass_rates(days=queries.SPARK_DAYS, event="push")[backend.id]


def test_a_figure_older_than_hud_cache_seconds_is_computed_by_the_request_which_enqueues_nothing(
    settings, make_backend, django_assert_num_queries, django_capture_on_commit_callbacks
):
    from django.core.cache import cache

    settings.HUD_CACHE_SECONDS = 60
    cache.clear()
    backend = make_backend("aged/npu")
    job(backend, name="a", event_type="push", head_sha="1" * 40)
    first = queries.backend_stats(days=1, event="push")
    job(backend, name="b", conclusion="failure", event_type="push", head_sha="1" * 40)
    key = softcache.figure_key("database", "stats", (1, "push", None))
    computed_at, value = cache.get(key)
    cache.set(key, (computed_at - 61, value))  # a minute later

    with django_capture_on_commit_callbacks() as enqueued, django_assert_num_queries(2):  # job results, lost dispatches
        assert queries.backend_stats(days=1, event="push")[backend.id].counts.total == 2  # computed here
    with django_assert_num_queries(0):
        assert queries.backend_stats(days=1, event="push") != first  # and cached
    assert enqueued == []
    cache.clear()


def test_the_refresh_task_caches_every_figure_the_default_pages_show(
    client, settings, django_assert_num_queries, django_capture_on_commit_callbacks
):
    from django.core.cache import cache

    from hud import tasks

    s = scenario.build()
    settings.HUD_CACHE_SECONDS = 180
    cache.clear()
    tasks.figures_refresh()
    job(s.backend, name="late", event_type="pull_request", pr_number=101, head_sha=scenario.A)  # after the refresh

    # the allowlist (and on the overview the gate notices and which backends are silent, 4: not figures); every figure
    # comes from the cache
    pages = {"/oot/": 6, "/oot/?days=1": 6, "/oot/?days=30": 6, "/api/oot/": 2, "/oot/metrics/": 1}
    with django_capture_on_commit_callbacks() as enqueued:
        for url, n in (pages | {"/oot/metrics/?days=90": 1}).items():
            with django_assert_num_queries(n):
                assert client.get(url).status_code == 200
    assert enqueued == []
    assert "33.3" in client.get("/oot/").content.decode()  # as refreshed: 2 of 6, without the late job
    cache.clear()


def test_the_default_figures_are_refreshed_every_minute():
    from django_q.models import Schedule

    schedules_installed()
    schedule = Schedule.objects.get(name="hud: refresh the default figures")
    assert (schedule.func, schedule.schedule_type, schedule.minutes) == ("hud.tasks.figures_refresh", "I", 1)


def test_the_refresh_does_nothing_with_the_cache_off(settings, django_assert_num_queries):
    from hud import tasks

    settings.HUD_CACHE_SECONDS = 0
    with django_assert_num_queries(0):
        tasks.figures_refresh()
