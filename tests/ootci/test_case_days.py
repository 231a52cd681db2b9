"""The test search's daily roll-up (ootci.case_days): it equals the cases of the parsed reports after a parse, a
re-parse, a re-parse that reads other cases or none, and the migration that fills it; the search reads from it what
it read from the cases."""

import importlib
import random
from datetime import UTC, datetime, timedelta

import pytest
from django.apps import apps
from django.urls import reverse

from hud.stores.base import as_datetime
from hud.stores.db.history import DatabaseStore
from ootci.models import TestDay, TestReport
from relay.reports import pull, reparse
from tests.hud.builders import ago, job, report_with
from tests.hud.history import cases_search
from tests.hud.history.cases_search import days_from_cases, days_rolled_up

pytestmark = pytest.mark.django_db

ADD = "test_ops.TestOps::test_add"
MUL = "test_ops.TestOps::test_mul"


def test_a_parsed_report_adds_its_cases_to_the_row_of_each_test_and_day(store, npu, make_backend):
    xpu = make_backend("intel/xpu", "L3", device="xpu")
    day = datetime(2026, 3, 10, tzinfo=UTC)
    early, late = day + timedelta(hours=1), day + timedelta(hours=20)
    report_with(job(npu, name="t"), {ADD: "failed", MUL: "passed"}, at=early)
    report_with(job(xpu, name="t"), {ADD: "passed", MUL: "skipped"}, at=late)
    report_with(job(npu, name="t2"), {ADD: "error"}, at=day + timedelta(days=1))

    assert days_rolled_up() == days_from_cases()
    (add,) = TestDay.objects.filter(test_id="test_ops.py::TestOps::test_add", day=day.date()).values_list(
        "runs", "failures", "last_run", "last_failure"
    )
    assert add == (2, 1, late, early)  # the latest result any status, the latest failure
    assert TestDay.objects.count() == 3


def test_a_re_parse_takes_the_reports_cases_out_until_it_is_parsed_again_then_counts_them_once(store, npu):
    report = report_with(job(npu, name="t"), {ADD: "failed", MUL: "passed"}, at=ago(days=2))
    other = report_with(job(npu, name="t2"), {ADD: "passed"}, at=ago(days=2, hours=-1))
    before = days_rolled_up()

    reparse.reports_reparse(report_ids=[report.pk])
    assert days_rolled_up() == days_from_cases()
    assert {r[0] for r in days_rolled_up()} == {"test_ops.py::TestOps::test_add"}  # only the other report's

    assert pull.report_parse(report_id=report.pk) == "parsed"
    assert days_rolled_up() == days_from_cases() == before
    reparse.reports_reparse(report_ids=[report.pk, other.pk])
    assert days_rolled_up() == set()
    pull.report_parse(report_id=other.pk)
    pull.report_parse(report_id=report.pk)
    assert days_rolled_up() == before


def test_a_re_parse_that_reads_other_cases_counts_those_instead(store, npu):
    report = report_with(job(npu, name="t"), {ADD: "failed", MUL: "passed"}, at=ago(days=1))
    cases = '<testcase classname="test_ops.TestOps" name="test_add"/>'
    cases += '<testcase classname="test_ops.TestOps" name="test_div"><skipped message="not here"/></testcase>'
    body = f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>'
    (store / report.store_key).write_text(body)  # as if the parser now read the same bytes otherwise

    reparse.reports_reparse(report_ids=[report.pk])
    assert pull.report_parse(report_id=report.pk) == "parsed"

    assert days_rolled_up() == days_from_cases()
    assert {(r[0], r[2], r[3]) for r in days_rolled_up()} == {
        ("test_ops.py::TestOps::test_add", 1, 0),
        ("test_ops.py::TestOps::test_div", 0, 0),
    }


def test_a_re_parse_that_finds_the_bytes_gone_leaves_the_reports_cases_out(store, npu):
    report = report_with(job(npu, name="t"), {ADD: "failed"}, at=ago(days=1))
    (store / report.store_key).unlink()

    reparse.reports_reparse(report_ids=[report.pk])
    assert pull.report_parse(report_id=report.pk) == TestReport.State.FAILED

    assert days_rolled_up() == days_from_cases() == set()


def test_jobs_deleted_in_the_admin_take_their_cases_out(store, npu, admin_client):
    day = datetime(2026, 3, 10, 9, tzinfo=UTC)
    gone, kept, alone = (job(npu, name=name) for name in ("gone", "kept", "alone"))
    report_with(gone, {ADD: "failed"}, at=day)
    report_with(kept, {ADD: "passed"}, at=day + timedelta(hours=1))
    report_with(alone, {MUL: "failed"}, at=day)

    response = admin_client.post(reverse("admin:ootci_jobresult_delete", args=[gone.pk]), {"post": "yes"})
    assert response.status_code == 302
    changelist = reverse("admin:ootci_jobresult_changelist")
    response = admin_client.post(
        changelist, {"action": "delete_selected", "_selected_action": [alone.pk], "post": "yes"}
    )
    assert response.status_code == 302

    assert days_rolled_up() == days_from_cases()
    assert {(r[0], r[2], r[3]) for r in days_rolled_up()} == {("test_ops.py::TestOps::test_add", 1, 0)}


def test_a_backend_deleted_in_the_admin_takes_its_cases_out(store, npu, make_backend, admin_client):
    day = datetime(2026, 3, 10, 9, tzinfo=UTC)
    xpu = make_backend("intel/xpu", "L3", device="xpu")
    report_with(job(npu, name="a"), {ADD: "failed", MUL: "failed"}, at=day)
    report_with(job(xpu, name="a"), {ADD: "passed"}, at=day + timedelta(hours=1))

    response = admin_client.post(reverse("admin:ootci_backend_delete", args=[npu.pk]), {"post": "yes"})
    assert response.status_code == 302

    assert days_rolled_up() == days_from_cases()
    assert {(r[0], r[2], r[3]) for r in days_rolled_up()} == {("test_ops.py::TestOps::test_add", 1, 0)}


def test_the_migration_fills_the_roll_up_from_the_cases_of_the_parsed_reports(store, npu):
    noon = datetime(2026, 3, 10, 12, tzinfo=UTC)
    for at in (noon, noon + timedelta(hours=11, minutes=59), noon + timedelta(hours=12), noon - timedelta(days=9)):
        report_with(job(npu, name=f"t{at}"), {ADD: "failed", MUL: "passed"}, at=at)
    pending = report_with(job(npu, name="pending"), {"test_x.TestX::test_pending": "passed"}, at=noon)
    reparse.reports_reparse(report_ids=[pending.pk])
    expected = days_from_cases()
    TestDay.objects.all().delete()

    importlib.import_module("ootci.migrations.0038_testday_fill").fill(apps, None)

    assert days_rolled_up() == expected
    assert len(expected) == 3 * 2  # three days, two tests: not the pending report's test


def test_the_search_reads_from_the_roll_up_what_it_read_from_the_cases(store, make_backend):
    rng = random.Random(30)
    backends = [make_backend(f"acme/{device}", "L2", device=device) for device in ("npu", "xpu", "mps")]
    tests = [f"test_ops.TestOps::test_{op}_{k}" for op in ("add", "ADD", "mul") for k in range(4)]
    statuses = ["passed"] * 6 + ["failed", "error", "xpass", "skipped", "xfail"]
    now = datetime(2026, 3, 31, 15, 30, tzinfo=UTC)
    midnight = datetime(2026, 3, 28, tzinfo=UTC)
    moments = [midnight, midnight - timedelta(microseconds=1), midnight + timedelta(microseconds=1)]
    moments += [now - timedelta(seconds=rng.uniform(0, 35 * 86400)) for _ in range(30)]
    for n, at in enumerate(moments):
        cases = {test: rng.choice(statuses) for test in rng.sample(tests, 7)}
        report_with(job(rng.choice(backends), name=f"t{n}"), cases, at=at)

    def rows(found: list[dict]) -> list[tuple]:
        return [
            (
                r["generic_id"],
                as_datetime(r["last_failure"]),
                as_datetime(r["last_run"]),
                int(r["runs"]),
                int(r["failures"]),
            )
            for r in found
        ]

    windows = [now - timedelta(days=days) for days in (1, 7, 30)] + moments[:3] + [now - timedelta(days=40)]
    compared = 0
    for since in windows:
        for text in ("test_", "add", "ADD_", "mul_3", "nothing"):
            for offset, limit in ((0, 51), (3, 4), (10, 51)):
                ask = {"text": text, "since": since, "offset": offset, "limit": limit}
                from_cases = rows(cases_search.search_rows(**ask))
                assert rows(DatabaseStore().search_rows(**ask)) == from_cases, ask
                compared += len(from_cases)
    assert compared > 200  # the answers compared are not empty ones
