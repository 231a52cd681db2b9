"""The failing-tests classification with ClickHouse configured (chdb) against without: it reads the database's cases and
history (TestRecent) either way, so the same hand-built history gives the same classes, baselines, scores and order,
with the cases copied to ClickHouse, not yet copied, or ClickHouse down."""

import pytest

from hud import tasks
from hud.failing import queries as failing_queries
from hud.stores import allowlisted, fallback
from hud.stores.clickhouse import connection as clickhouse
from hud.stores.clickhouse import copy_cases
from tests.hud.failing.test_classes import build_pr, history, npu, xpu  # noqa: F401 - fixtures
from tests.hud.failing_history import BASE, generic_id
from tests.hud.stores.test_fallback import unreachable  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db


def everything() -> dict:
    npu_, xpu_ = allowlisted.backend("acme/npu"), allowlisted.backend("intel/xpu")
    return {
        "pr": failing_queries.pr_failing_tests(7),
        "npu latest": failing_queries.failing_tests(npu_),
        "npu pr": failing_queries.failing_tests(npu_, pr=7),
        "xpu pr": failing_queries.failing_tests(xpu_, pr=7),
        "xpu latest": failing_queries.failing_tests(xpu_),
    }


@pytest.fixture
def built(history, npu, xpu):  # noqa: F811
    build_pr(history, npu, xpu)
    for n, status in enumerate(["failed", "passed", "failed", "passed", "failed"]):  # a flaky score on npu's latest
        history.baseline(npu, {"t_old": status, "t_s": status}, sha=f"{n + 1:040x}", hours=9 - n)
    history.baseline(xpu, {"t_s": "passed"}, sha=f"{5:040x}", hours=4)  # passes elsewhere at npu's latest SHA


def test_with_clickhouse_configured_the_same_history_is_classified_the_same_way(settings, tmp_path, built):
    settings.CLICKHOUSE_URL = ""
    from_database = everything()
    settings.CLICKHOUSE_URL = f"chdb://{tmp_path / 'clickhouse'}"
    tasks.clickhouse_replicate()
    tasks.clickhouse_replicate()  # the overlap sends recent cases again (the test search's reads collapse them)

    with fallback.unit_of_work():
        assert fallback.source() == "clickhouse"
        copies = clickhouse.select(f"SELECT count() AS n FROM {copy_cases.TABLE}")[0]["n"]
        distinct = clickhouse.select(f"SELECT count() AS n FROM {copy_cases.TABLE} FINAL")[0]["n"]
        assert copies > distinct  # duplicates are there to collapse
        from_clickhouse = everything()
        assert fallback.fallback_reason() == ""  # every read came from ClickHouse

    assert from_clickhouse == from_database
    latest = from_clickhouse["npu latest"]
    t_s = next(t for t in latest.tests if t.test_id == generic_id("t_s"))
    assert (t_s.flakiness, t_s.classes, t_s.verdict) == (
        1.0,
        ("passed on baseline", "only here", "flaky"),
        "flaky",
    )  # the previous run (passed) is its baseline
    assert from_clickhouse["npu pr"].baseline.sha == BASE


def test_with_clickhouse_down_the_failing_tests_view_is_whole(client, settings, built, unreachable):  # noqa: F811
    settings.CLICKHOUSE_URL = ""
    expected = client.get("/api/oot/acme/npu/failing-tests/?pr=7").json()
    settings.CLICKHOUSE_URL = unreachable
    fallback._outage.update(until=0.0, reason="")

    assert client.get("/api/oot/acme/npu/failing-tests/?pr=7").json() == expected
    html = client.get("/oot/acme/npu/?view=failing-tests&pr=7").content.decode()
    assert "3 new failures on npu" in html
    assert "Analytics store unavailable" not in html  # it read nothing from ClickHouse


def test_with_clickhouse_configured_and_no_case_copied_yet_the_scores_are_whole(settings, tmp_path, built):
    settings.CLICKHOUSE_URL = ""
    expected = failing_queries.failing_tests(allowlisted.backend("acme/npu"), pr=7)
    settings.CLICKHOUSE_URL = f"chdb://{tmp_path / 'clickhouse'}"  # configured, no case copied yet

    with fallback.unit_of_work():
        found = failing_queries.failing_tests(allowlisted.backend("acme/npu"), pr=7)
        assert fallback.fallback_reason() == ""

    # The history is the database's (TestRecent), not ClickHouse's copy: nothing waits for the replication.
    assert found == expected
    assert found.new == 3
    assert sum(t.results for t in found.tests) > len(found.tests)  # scores read the results before the PR
