"""Every case of every parsed test report copied to ClickHouse (`oot_test_case`) against the real embedded engine
(chdb), from the raw bytes in the intermediate store, with the high-water mark of the job-result replication."""

import io

import pytest

from hud import tasks
from hud.models import ReplicationCursor
from hud.stores.clickhouse import case_table, copy_cases
from hud.stores.clickhouse import connection as clickhouse
from ootci.models import TestCase, TestDay, TestReport
from relay.reports import pull
from relay.reports import reparse as reparse_module
from tests.hud import builders
from tests.relay.report_files import junit_xml

pytestmark = pytest.mark.django_db

MUL0 = "test_ops.py::TestCommon{DEVICE}::test_mul_{device}_int0"


@pytest.fixture
def chdb(settings, tmp_path):
    settings.CLICKHOUSE_URL = f"chdb://{tmp_path / 'clickhouse'}"
    return tmp_path / "clickhouse"


@pytest.fixture
def npu(make_backend, settings, tmp_path):
    settings.TEST_REPORTS_URL = (tmp_path / "reports").as_uri()
    return make_backend(repo="acme/npu", level="L2", device="npu")


@pytest.fixture
def parsed(npu, django_capture_on_commit_callbacks):
    """A job with a report stored and parsed (tasks inline), as the relay does it."""
    counter = iter(range(1, 1000))

    def parse(data: bytes) -> TestReport:
        job = builders.job(npu, name=f"test-{next(counter)}", conclusion="failure")
        with django_capture_on_commit_callbacks(execute=True):
            received = pull.spooled(io.BytesIO(data), limit=10**8)
            report, _ = pull.report_store(job=job, received=received, source="upload")
        report.refresh_from_db()
        assert report.state == "parsed", report.reason
        return report

    return parse


def cases() -> list[dict]:
    return clickhouse.select(f"SELECT * FROM {copy_cases.TABLE} FINAL ORDER BY report_id, ordinal")


def days_alike(*, empty: bool = False) -> None:
    """The test search's daily roll-up in ClickHouse equals PostgreSQL's (``TestDay``, kept by ``ootci.case_days`` at
    parse time, apart from the copy), and is ``empty`` or not."""
    rolled = clickhouse.rows(
        f"SELECT generic_id, day, runs, failures, last_run, last_failure FROM {case_table.DAY_TABLE} FINAL "
        "ORDER BY generic_id, day"
    )
    kept = TestDay.objects.order_by("test_id", "day")
    assert bool(rolled) != empty
    assert rolled == list(kept.values_list("test_id", "day", "runs", "failures", "last_run", "last_failure"))


def cursor() -> ReplicationCursor:
    return ReplicationCursor.objects.get(name=copy_cases.CURSOR_NAME)


def test_every_case_is_copied_passed_ones_too(chdb, npu, parsed):
    report = parsed(junit_xml(passed=50, failed=2, reruns=1))

    tasks.clickhouse_replicate()

    rows = cases()
    kept = list(TestCase.objects.filter(report=report).order_by("id").values_list("test_id", "status"))
    assert len(rows) == 52 == report.cases == len(kept)
    assert [(r["generic_id"], r["status"]) for r in rows] == kept  # the same cases as PostgreSQL's
    assert [r["ordinal"] for r in rows] == list(range(52))
    assert {r["status"] for r in rows[:50]} == {"passed"}
    failed = rows[50]
    assert (failed["generic_id"], failed["status"], failed["reruns"]) == (MUL0, "failed", 1)
    assert "AssertionError: 0 != 1" in failed["message"]
    assert (failed["backend_id"], failed["backend_repo"], failed["job_id"]) == (npu.pk, "acme/npu", report.job_id)
    assert failed["reported_at"] == report.received_at
    assert rows[0]["generic_id"] == "test_ops.py::TestCommon{DEVICE}::test_add_{device}_float0"
    days_alike()


def test_cases_can_be_looked_up_per_test_across_reports(chdb, parsed):
    first, second = parsed(junit_xml(passed=3, failed=1)), parsed(junit_xml(passed=3, failed=2))
    tasks.clickhouse_replicate()

    history = clickhouse.select(
        f"SELECT report_id, status FROM {copy_cases.TABLE} FINAL WHERE generic_id = %(id)s ORDER BY reported_at",
        {"id": MUL0},
    )
    assert history == [{"report_id": first.pk, "status": "failed"}, {"report_id": second.pk, "status": "failed"}]


def test_nothing_is_lost_while_clickhouse_is_down(chdb, parsed, settings):
    first = parsed(junit_xml(passed=5, failed=1))
    tasks.clickhouse_replicate()
    before = cursor()

    settings.CLICKHOUSE_URL = "http://127.0.0.1:1/ootci"
    later = [parsed(junit_xml(passed=7, failed=1)), parsed(junit_xml(passed=2, failed=3))]  # parsed while it is down
    with pytest.raises(clickhouse.ClickHouseError):
        tasks.clickhouse_replicate()
    assert (cursor().last_updated_at, cursor().last_id) == (before.last_updated_at, first.pk)

    settings.CLICKHOUSE_URL = f"chdb://{chdb}"
    tasks.clickhouse_replicate()

    rows = cases()
    assert [(r["report_id"], r["ordinal"]) for r in rows] == [
        (report.pk, n) for report in (first, *later) for n in range(report.cases)
    ]
    assert (cursor().last_id, cursor().last_error) == (later[-1].pk, "")
    days_alike()


def test_re_sent_cases_collapse(chdb, parsed, django_capture_on_commit_callbacks):
    report = parsed(junit_xml(passed=20, failed=2))
    tasks.clickhouse_replicate()
    tasks.clickhouse_replicate()  # the overlap reads the report again

    with django_capture_on_commit_callbacks(execute=True):
        reparse_module.reports_reparse(report_ids=[report.pk])  # parsed again: a newer version of every case
    tasks.clickhouse_replicate()

    assert cursor().rows_copied >= 3 * 22  # every case sent at least three times
    rows = cases()
    assert len(rows) == 22
    report.refresh_from_db()
    assert {r["version"] for r in rows} == {copy_cases._micros(report.parsed_at)}
    days_alike()


def test_a_report_whose_bytes_are_gone_is_passed_over(chdb, parsed, tmp_path, settings):
    settings.CLICKHOUSE_URL = ""  # no copy at parse time
    gone = parsed(junit_xml(passed=4, failed=1))
    kept = parsed(junit_xml(passed=2, failed=1))
    (tmp_path / "reports" / gone.store_key).unlink()  # retention deleted it before a copy

    settings.CLICKHOUSE_URL = f"chdb://{chdb}"
    tasks.clickhouse_replicate()

    assert {r["report_id"] for r in cases()} == {kept.pk}
    assert cursor().last_id == kept.pk


def reparse(report: TestReport, data: bytes, tmp_path, capture) -> TestReport:
    """Parse ``report`` again from ``data`` put in place of its stored bytes (as a parser change would read them)."""
    (tmp_path / "reports" / report.store_key).write_bytes(data)
    with capture(execute=True):
        reparse_module.reports_reparse(report_ids=[report.pk])
    report.refresh_from_db()
    return report


def test_a_re_parse_that_gives_other_cases_leaves_no_earlier_case_behind(
    chdb, parsed, tmp_path, django_capture_on_commit_callbacks
):
    report, other = parsed(junit_xml(passed=20, failed=2)), parsed(junit_xml(passed=3, failed=1))
    tasks.clickhouse_replicate()
    assert len(cases()) == 26

    report = reparse(report, junit_xml(passed=5, failed=1), tmp_path, django_capture_on_commit_callbacks)
    assert (report.state, report.cases) == ("parsed", 6)
    tasks.clickhouse_replicate()  # (the parse's commit ran one already)

    rows = cases()
    for r in (report, other):
        kept = list(TestCase.objects.filter(report=r).order_by("id").values_list("test_id", "status"))
        assert [(c["generic_id"], c["status"]) for c in rows if c["report_id"] == r.pk] == kept
    assert len(rows) == 6 + 4
    days_alike()  # the tests the new parse no longer has are gone from the roll-up too
    report.refresh_from_db()
    assert not report.replaced
    assert not TestReport.objects.filter(replaced=True).exists()


def test_a_re_parse_that_refuses_the_report_removes_its_cases(
    chdb, parsed, tmp_path, django_capture_on_commit_callbacks
):
    report = parsed(junit_xml(passed=4, failed=1))
    tasks.clickhouse_replicate()
    assert len(cases()) == 5

    report = reparse(report, b"<testsuite><testcase", tmp_path, django_capture_on_commit_callbacks)
    assert report.state == "refused" and not TestCase.objects.filter(report=report).exists()
    tasks.clickhouse_replicate()

    assert cases() == []
    days_alike(empty=True)
    report.refresh_from_db()
    assert not report.replaced


def test_a_re_parse_still_pending_keeps_its_mark_and_the_cases_until_it_ends(
    chdb, parsed, tmp_path, django_capture_on_commit_callbacks
):
    report = parsed(junit_xml(passed=4, failed=1))
    tasks.clickhouse_replicate()

    reparse_module.reports_reparse(report_ids=[report.pk])  # queued, its parse not run yet
    tasks.clickhouse_replicate()

    assert len(cases()) == 5
    report.refresh_from_db()
    assert (report.state, report.replaced) == ("pending", True)


def test_a_table_made_before_the_roll_up_gets_it_filled_from_its_cases(chdb, parsed):
    parsed(junit_xml(passed=3, failed=1))
    parsed(junit_xml(passed=2, failed=2))
    tasks.clickhouse_replicate()
    with clickhouse.session():
        clickhouse.command(f"DROP TABLE {case_table.DAY_TABLE}")

    with clickhouse.session():
        copy_cases.schema_ensure()  # as the next copy finds it

    days_alike()
