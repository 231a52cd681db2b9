"""The ClickHouse store (chdb) against the database store: the same data gives the same figures, query by query.
(The PR and job pages read the database whatever the store: ``tests/hud/stores/test_fallback.py``.)

Each test fills PostgreSQL, replicates to an embedded ClickHouse under tmp_path and computes every HUD figure
twice through ``hud.figures.queries``, once per store, with the same ``now``.
"""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from hud.figures import queries
from hud.stores import allowlisted, fallback
from hud.stores.clickhouse import connection as clickhouse
from hud.stores.clickhouse import copy_jobs
from hud.stores.types import EVENTS
from ootci.models import JobResult, PullRequest
from tests.hud import scenario
from tests.hud.builders import ago, dispatch, job, pull_request

pytestmark = pytest.mark.django_db

WINDOWS = (1, 7, 30)


@pytest.fixture
def chdb_url(tmp_path) -> str:
    return f"chdb://{tmp_path / 'clickhouse'}"


def figures(*, now, backend_ids, events=EVENTS, pages=(1, 2)) -> dict:
    """Every figure the pages and the API show, keyed by what was asked."""
    found: dict = {}
    for event in events:
        for days in WINDOWS:
            found["overview", days, event] = queries.overview(days=days, event=event, now=now)
            found["daily", days, event] = queries.daily_pass_rates(days=days, event=event, now=now)
            for bid in backend_ids:
                found["stats", days, event, bid] = queries.backend_stats(
                    days=days, event=event, backend_id=bid, now=now
                )
                for failing in (False, True):
                    for page in pages:
                        found["matrix", days, event, bid, failing, page] = queries.backend_matrix(
                            backend_id=bid, days=days, event=event, failing_only=failing, page=page, now=now
                        )
        for days in (14, 90):
            found["metrics", days, event] = queries.metrics(days=days, event=event, now=now)
    found["readiness"] = queries.readiness(now=now)
    return found


def assert_same_figures(settings, url: str, **asked) -> dict:
    now = timezone.now()
    settings.CLICKHOUSE_URL = ""
    from_database = figures(now=now, **asked)
    settings.CLICKHOUSE_URL = url
    with fallback.unit_of_work():
        assert fallback.source() == "clickhouse"
        from_clickhouse = figures(now=now, **asked)
        assert fallback.fallback_reason() == ""  # every figure came from ClickHouse, none from a fallback
    assert from_clickhouse.keys() == from_database.keys()
    for key, value in from_database.items():
        assert from_clickhouse[key] == value, key
    return from_clickhouse


def test_the_hand_counted_history_has_the_same_figures_in_both_stores(settings, chdb_url, make_backend):
    s = scenario.build()
    xpu = make_backend("intel/xpu", "L4", device="xpu")
    listed = make_backend("quiet/npu", "L1")
    pr = PullRequest.objects.get(number=101)
    d = dispatch(xpu, sha=pr.head_sha, at=ago(days=3), pr=pr)
    for n in range(1, 4):  # shard-10 sorts after shard-5; one shard is still running
        job(xpu, name=f"shard-{n * 5}", conclusion="failure" if n == 2 else "success" if n < 3 else "", dispatch_=d)
    job(listed, name="build", event_type="pull_request", pr_number=101, head_sha=pr.head_sha)
    late_sha = job(xpu, name="lint", dispatch_=d, head_sha="")  # keyed by its delivery until the SHA is known
    job(xpu, name="ut", conclusion="failure", dispatch_=d, failed_tests=["test_e"], failed=None)  # test failure
    at = ago(hours=2)  # attempts reported in the same microsecond: the higher attempt is the latest, not the higher id
    job(xpu, name="retry", dispatch_=d, run_id="9", run_attempt=2, started_at=at, created_at=at)
    job(xpu, name="retry", conclusion="failure", dispatch_=d, run_id="9", run_attempt=1, started_at=at, created_at=at)
    for _ in range(2):  # no SHA reported: each delivery is its own job
        job(xpu, name="build", dispatch_=dispatch(xpu, sha="", at=ago(hours=3), event="push"))
    pr105 = pull_request(105, "9" * 40, title="Dispatched again")
    job(
        s.backend,
        name="build",
        finished=ago(days=3),
        dispatch_=dispatch(s.backend, sha="9" * 40, at=ago(days=3), pr=pr105),
    )
    again = dispatch(s.backend, sha="9" * 40, at=ago(hours=7), pr=pr105)  # lost: its row moves up to its time
    gone = job(xpu, name="flaky", conclusion="failure", dispatch_=d)
    settings.CLICKHOUSE_URL = chdb_url
    copy_jobs.replicate()
    # Rows that change after a copy exist in ClickHouse in two versions until a merge: reads must see the newest.
    running = JobResult.objects.get(backend=s.backend, job_name="run")
    running.status, running.conclusion, running.completed_at = "completed", "failure", ago(minutes=5)
    running.failed, running.failed_tests = 2, ["test_c", "test_d"]
    running.save()
    late_sha.head_sha = pr.head_sha
    late_sha.save()
    job(s.backend, name="test", dispatch_=s.test_failure.dispatch, run_id="78", run_attempt=2, queue_time=30)
    copy_jobs.replicate()
    gone.delete()
    assert copy_jobs.prune_deleted() == 1
    assert clickhouse.select(f"SELECT count() AS n FROM {clickhouse.TABLE}")[0]["n"] > JobResult.objects.count() + 1

    found = assert_same_figures(
        settings,
        chdb_url,
        backend_ids=[s.backend.id, xpu.id, listed.id],
    )

    # The figures are the hand-counted ones, not two equally wrong answers: the re-run test job passed, the
    # running one failed with tests.
    counts = found["stats", 7, "pull_request", s.backend.id][s.backend.id].counts
    assert (counts.successes, counts.test_failures, counts.infra_failures, counts.lost) == (4, 1, 4, 2)
    xpu_counts = found["stats", 7, "pull_request", xpu.id][xpu.id].counts
    assert (xpu_counts.successes, xpu_counts.test_failures, xpu_counts.infra_failures) == (3, 1, 1)  # none deleted
    assert queries.pull_request(101).summary["jobs"] == 13
    row = next(r for r in found["matrix", 7, "pull_request", s.backend.id, False, 1].rows if r.pr_number == 105)
    assert (row.at, row.lost, list(row.cells)) == (again.created_at, 1, ["ci / build"])


def test_the_demo_data_has_the_same_figures_in_both_stores(settings, chdb_url):
    call_command("seed_demo", stdout=None)
    settings.CLICKHOUSE_URL = chdb_url
    copy_jobs.replicate()
    backends = allowlisted.backends()

    found = assert_same_figures(
        settings,
        chdb_url,
        events=("pull_request", "nightly"),
        backend_ids=[b.id for b in backends if b.level != "L1"][:4],
    )

    overview = found["overview", 7, "pull_request"]
    assert sum(r.stats.counts.total for rows in overview.sections.values() for r in rows) > 100
    assert any(m.has_next for key, m in found.items() if key[0] == "matrix" and key[5] == 1)


def test_windows_start_at_the_microsecond_in_both_stores(settings, chdb_url, make_backend):
    backend = make_backend("edge/npu", "L2")
    now = timezone.now()
    edge = now - timedelta(days=7)
    for n, offset in enumerate((-1, 0, 1)):  # a microsecond before, at, and after the window's start
        job(backend, name=f"j{n}", event_type="push", finished=edge + timedelta(microseconds=offset))
    settings.CLICKHOUSE_URL = chdb_url
    copy_jobs.replicate()

    for url in ("", chdb_url):
        settings.CLICKHOUSE_URL = url
        stats = queries.backend_stats(days=7, event="push", now=now)[backend.id]
        assert stats.counts.successes == 2, url
        assert stats.last_run == edge + timedelta(microseconds=1)


def test_each_window_picks_its_own_latest_attempts_in_both_stores(settings, chdb_url, make_backend):
    from tests.hud.figures.test_queries import a_rerun_that_finished_before_the_first_attempt

    backend = make_backend("windows/npu", "L3")
    a_rerun_that_finished_before_the_first_attempt(backend)
    job(backend, name="open", conclusion="", event_type="push", head_sha="7" * 40, queue_time=None)  # NULLs too
    job(backend, name="open", event_type="push", head_sha="7" * 40, queue_time=5, finished=ago(hours=3))
    settings.CLICKHOUSE_URL = chdb_url
    copy_jobs.replicate()

    assert_same_figures(settings, chdb_url, events=("push",), backend_ids=[backend.id])


def test_a_run_across_a_window_start_has_the_same_time_in_both_stores(settings, chdb_url, make_backend):
    from tests.hud.figures.test_queries import a_run_across_a_window_start

    backend = make_backend("whole/npu", "L3", device="w")
    a_run_across_a_window_start(backend)
    settings.CLICKHOUSE_URL = chdb_url
    copy_jobs.replicate()

    found = assert_same_figures(settings, chdb_url, events=("pull_request",), backend_ids=[backend.id])
    assert found["readiness"][backend.id].demotion.e2e_p50 == pytest.approx(3 * 86400, abs=1)  # 7 days: PR 6 alone


def test_readiness_at_each_gates_edge_is_the_same_in_both_stores(settings, chdb_url, make_backend):
    from tests.hud.readiness.test_readiness import pr_jobs

    edge = make_backend("edge/npu", "L3", device="edge")  # 100 jobs: 1 timeout, 1 overrun; queue average 1800 s
    pr_jobs(edge, 97, queue_time=1800.0)
    pr_jobs(edge, 1, first=200, queue_time=1799.0, execution_time=3 * 3600.0 + 1)
    pr_jobs(edge, 1, first=300, queue_time=1801.0, execution_time=3 * 3600.0)
    job(
        edge,
        name="t",
        conclusion="timed_out",
        event_type="pull_request",
        pr_number=9,
        head_sha="9" * 40,
        queue_time=1800.0,
        finished=ago(days=9),
    )
    now = timezone.now()
    settings.CLICKHOUSE_URL = ""
    from_database = queries.readiness(now=now)
    settings.CLICKHOUSE_URL = chdb_url
    copy_jobs.replicate()
    with fallback.unit_of_work():
        from_clickhouse = queries.readiness(now=now)
        assert fallback.fallback_reason() == ""

    assert from_clickhouse == from_database
    r = from_clickhouse[edge.id]
    assert (r.promotion.total, r.promotion.overruns, r.promotion.timed_out, r.promotion.queue_avg) == (100, 1, 1, 1800)
    assert [g.passed for g in r.promotion_gates] == [False, False, True, False]
    assert (r.demotion.total, [g.passed for g in r.demotion_gates]) == (99, [False, False, True, True])  # 1 of 99
