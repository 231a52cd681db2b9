"""The failing-tests classification from ClickHouse (chdb, `oot_test_case`) against PostgreSQL (TestCase): the same
hand-built history gives the same classes, baselines, scores and order; with ClickHouse down the database answers."""

import pytest

from hud import tasks
from hud.failing import queries as failing_queries
from hud.stores import allowlisted, fallback
from hud.stores.clickhouse import connection as clickhouse
from hud.stores.clickhouse import copy_cases
from hud.stores.clickhouse.failing import ClickHouseCases
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


def test_both_stores_classify_the_same_history_the_same_way(settings, tmp_path, built):
    settings.CLICKHOUSE_URL = ""
    from_database = everything()
    settings.CLICKHOUSE_URL = f"chdb://{tmp_path / 'clickhouse'}"
    tasks.clickhouse_replicate()
    tasks.clickhouse_replicate()  # the overlap sends recent cases again: the reads must collapse them (FINAL)

    with fallback.unit_of_work():
        assert fallback.source() == "clickhouse"
        copies = clickhouse.select(f"SELECT count() AS n FROM {copy_cases.TABLE}")[0]["n"]
        distinct = clickhouse.select(f"SELECT count() AS n FROM {copy_cases.TABLE} FINAL")[0]["n"]
        assert copies > distinct  # duplicates are there to collapse
        npu_id = allowlisted.backend("acme/npu").id
        assert len(ClickHouseCases().history(tests={npu_id: [generic_id("t_s")]}, limit=20)) == 5
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


def test_with_clickhouse_down_the_database_answers_and_the_page_says_so(client, settings, built, unreachable):  # noqa: F811
    settings.CLICKHOUSE_URL = ""
    expected = client.get("/api/oot/acme/npu/failing-tests/?pr=7").json()
    settings.CLICKHOUSE_URL = unreachable
    fallback._outage.update(until=0.0, reason="")

    assert client.get("/api/oot/acme/npu/failing-tests/?pr=7").json() == expected
    html = client.get("/oot/acme/npu/?view=failing-tests&pr=7").content.decode()
    assert "Analytics store unavailable" in html and "3 new failures on npu" in html


def test_with_clickhouse_the_cases_of_the_jobs_come_from_the_database_and_the_history_from_clickhouse(
    settings, tmp_path, built
):
    settings.CLICKHOUSE_URL = ""
    expected = failing_queries.failing_tests(allowlisted.backend("acme/npu"), pr=7)
    settings.CLICKHOUSE_URL = f"chdb://{tmp_path / 'clickhouse'}"  # configured, no case copied yet

    with fallback.unit_of_work():
        found = failing_queries.failing_tests(allowlisted.backend("acme/npu"), pr=7)
        assert fallback.fallback_reason() == ""

    # The failing tests and their classes by job (baseline, other backends) are the database's; the history read
    # from ClickHouse is empty until the cases are copied there.
    assert sorted((t.test_id, t.baseline, t.elsewhere) for t in found.tests) == sorted(
        (t.test_id, t.baseline, t.elsewhere) for t in expected.tests
    )
    assert found.new == expected.new == 3
    # The score reads the cases at the PR's head (database) and none before (ClickHouse, empty): fewer results.
    results = {t.test_id: t.results for t in expected.tests}
    assert all(t.results <= results[t.test_id] for t in found.tests)
    assert sum(t.results for t in found.tests) < sum(results.values())
