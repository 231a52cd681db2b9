"""The per-test history on ClickHouse (chdb) against the database: the same reports give the same search pages and
test pages. The cases reach ClickHouse as in production: parsed again from the stored report bytes by the
replication (``hud.stores.clickhouse.copy_cases``)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from hud import tasks
from hud.history import queries as history_queries
from hud.stores import fallback
from hud.stores.clickhouse import case_table
from hud.stores.clickhouse import connection as clickhouse
from ootci.case_days import day_of, day_start
from tests.hud import histories
from tests.hud.builders import job, report_with

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_outage_left_over():
    yield
    fallback._outage.update(until=0.0, reason="")


def both_stores(settings, url: str, ask) -> tuple:
    """``ask(now)`` from the database, then from ClickHouse (asserting that no read fell back)."""
    now = timezone.now()
    settings.CLICKHOUSE_URL = ""
    from_database = ask(now)
    settings.CLICKHOUSE_URL = url
    with fallback.unit_of_work():
        assert fallback.source() == "clickhouse"
        from_clickhouse = ask(now)
        assert fallback.fallback_reason() == ""
    return from_database, from_clickhouse


def test_the_hand_built_histories_read_the_same_from_both_stores(settings, make_backend, tmp_path):
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    url = f"chdb://{tmp_path / 'clickhouse'}"
    histories.build(make_backend)
    settings.CLICKHOUSE_URL = url
    assert tasks.clickhouse_replicate() > 0

    def ask(now):
        found = {}
        for days in (1, 7, 30):
            for generic_id in (histories.ADD, histories.ADDMM, histories.LAYER, "no_such.py::T::t"):
                found["page", generic_id, days] = history_queries.page(generic_id=generic_id, days=days, now=now)
            for text in ("add", "ADD", "bulk", "TestBulk::test_b", "k::test_", "st_0%", "nothing"):
                for page in (1, 2, 3):
                    found["search", text, days, page] = history_queries.search(text=text, days=days, page=page, now=now)
        return found

    from_database, from_clickhouse = both_stores(settings, url, ask)

    assert from_clickhouse.keys() == from_database.keys()
    for key, value in from_database.items():
        assert from_clickhouse[key] == value, key
    assert len(from_database["search", "bulk", 7, 3].hits) == 21  # the figures compared are not empty ones
    assert from_database["page", histories.ADD, 7].backends[0].last_failure.message.startswith("RuntimeError")


def test_a_window_s_first_day_counts_from_its_start_in_both_stores(settings, make_backend, tmp_path):
    """Both stores read a window's whole days from their daily roll-ups and its first, partial day from the cases: a
    report on that day after the window's start counts, one just before it does not, one on its next day does."""
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    url = f"chdb://{tmp_path / 'clickhouse'}"
    npu = make_backend("acme/npu", "L2", device="npu")
    now = timezone.now()
    for days in (1, 7, 30):
        start = now - timedelta(days=days)
        midnight = day_start(day_of(start) + timedelta(days=1))
        for where, at in (("in", start + (midnight - start) / 2), ("before", start - timedelta(minutes=10))):
            cases = {"test_day.TestDay::test_every": "failed", f"test_day.TestDay::test_{where}_{days}": "passed"}
            report_with(job(npu, name=f"{where}-{days}"), cases, at=at)
        report_with(job(npu, name=f"next-{days}"), {"test_day.TestDay::test_every": "passed"}, at=midnight)
    settings.CLICKHOUSE_URL = url
    tasks.clickhouse_replicate()

    def ask(now):
        return {
            days: [(h.generic_id, h.runs, h.failures, h.last_failure, h.last_run) for h in page.hits]
            for days in (1, 7, 30)
            if (page := history_queries.search(text="test_day.", days=days, page=1, now=now))
        }

    from_database, from_clickhouse = both_stores(settings, url, ask)

    assert from_clickhouse == from_database
    every = []
    for days in (1, 7, 30):
        found = {hit[0].rsplit("::", 1)[1]: hit[1:3] for hit in from_database[days]}
        assert found[f"test_in_{days}"] == (1, 0) and f"test_before_{days}" not in found
        every.append(found["test_every"])
    assert every == [(2, 1), (5, 3), (8, 5)]  # (runs, failures): a longer window holds a shorter one's "before"


def test_a_re_parsed_report_counts_once_in_clickhouse(settings, make_backend, tmp_path):
    """Re-sent and re-parsed copies of a case collapse (FINAL): counts match PostgreSQL's single row."""
    from relay.reports import pull, reparse

    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    url = f"chdb://{tmp_path / 'clickhouse'}"
    npu = make_backend("acme/npu", "L2", device="npu")
    report = report_with(job(npu, name="t"), {"test_x.TestX::test_once": "failed"})
    settings.CLICKHOUSE_URL = url
    tasks.clickhouse_replicate()
    reparse.reports_reparse(report_ids=[report.pk])
    pull.report_parse(report_id=report.pk)
    tasks.clickhouse_replicate()

    from_database, from_clickhouse = both_stores(
        settings, url, lambda now: history_queries.search(text="test_once", days=7, page=1, now=now)
    )

    assert from_clickhouse == from_database
    assert [(h.runs, h.failures) for h in from_clickhouse.hits] == [(1, 1)]


def test_the_test_pages_answer_from_the_database_when_clickhouse_is_down(client, settings, make_backend, tmp_path):
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    histories.build(make_backend)
    settings.CLICKHOUSE_URL = "http://default:x@127.0.0.1:1/ootci"  # nothing listens there

    page = client.get(f"/oot/tests/{histories.ADD}/").content.decode()
    found = client.get("/api/oot/tests/?q=addmm").json()

    assert "Analytics store unavailable" in page and "40.0%" in page
    assert [h["generic_id"] for h in found["hits"]] == [histories.ADDMM]


def test_a_table_made_before_the_search_index_gets_it(settings, tmp_path):
    settings.CLICKHOUSE_URL = f"chdb://{tmp_path / 'clickhouse'}"
    older = case_table.SCHEMA.replace(f",\n        {case_table.SEARCH_INDEX}", "")
    assert older != case_table.SCHEMA
    with clickhouse.session():
        clickhouse.command(older)
        case_table.ensure_schema()
        case_table.ensure_schema()  # and again: nothing to add
        found = clickhouse.rows("SELECT name FROM system.data_skipping_indices WHERE table = 'oot_test_case'")

    assert found == [(case_table.SEARCH_INDEX_NAME,)]
