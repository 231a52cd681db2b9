"""The failing tests' history (ootci.case_recent): per backend and test, it equals the newest HISTORY counted cases of
the parsed reports of the backend's nightly and push runs, read from the cases here (an independent reading), after
parses in any arrival order, a re-parse, deletions in the admin, concurrent parses of one backend, and the migration
that fills it."""

import importlib
import random
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.apps import apps
from django.db import connection, transaction
from django.urls import reverse

from ootci import case_recent
from ootci.models import TestCase, TestRecent
from ootci.verdicts import HISTORY
from relay.reports import pull, reparse
from tests.hud.builders import ago, job, report_with
from tests.ootci.test_case_days import ADD, MUL

pytestmark = pytest.mark.django_db

ADD_ID = "test_ops.py::TestOps::test_add"


def recent_from_cases() -> dict[tuple[int, str], list[tuple]]:
    """What the roll-up must hold, read from every case: (backend, test) → its newest results."""
    cases = TestCase.objects.filter(report__state="parsed", job__event_type__in=("nightly", "push"))
    found: dict[tuple[int, str], list[tuple]] = {}
    rows = cases.values_list(
        "job__backend_id", "test_id", "report__received_at", "report_id", "id", "status", "reruns", "job_id"
    )
    for backend_id, test_id, at, report_id, case_id, status, reruns, job_id in rows:
        if status in ("passed", "failed", "error", "xpass"):
            found.setdefault((backend_id, test_id), []).append((at, report_id, case_id, status, reruns, job_id))
    return {
        key: [(s, r, j, at) for at, _, _, s, r, j in sorted(results, reverse=True)[:HISTORY]]
        for key, results in found.items()
    }


def recent_rolled_up() -> dict[tuple[int, str], list[tuple]]:
    """The roll-up as the failing tests' history reads it."""
    tests: dict[int, list[str]] = {}
    for backend_id, test_id in TestRecent.objects.values_list("backend_id", "test_id"):
        tests.setdefault(backend_id, []).append(test_id)
    return {
        key: [(r["status"], r["reruns"], r["job_id"], r["at"]) for r in results]
        for key, results in case_recent.recent_rows(tests, limit=HISTORY).items()
    }


def test_parses_in_any_arrival_order_keep_each_tests_newest_results_in_order(store, npu, make_backend):
    rng = random.Random(47)
    xpu = make_backend("intel/xpu", "L3", device="xpu")
    now = datetime(2026, 3, 31, 12, tzinfo=UTC)
    statuses = ["passed"] * 3 + ["failed", "error", "xpass", "skipped", "xfail", ("passed", 2, "")]
    for n in range(4 * HISTORY):  # more results than are kept, arriving out of order
        backend = rng.choice([npu, npu, npu, xpu])
        event = rng.choice(["nightly", "nightly", "push", "pull_request"])
        cases = {test: rng.choice(statuses) for test in (ADD, rng.choice([MUL, "test_x.TestX::test_y"]))}
        at = now - timedelta(hours=rng.uniform(0, 200))
        report_with(job(backend, name=f"t{n}", event_type=event, head_sha=f"{n:040x}"), cases, at=at)

    expected = recent_from_cases()
    assert recent_rolled_up() == expected
    assert max(len(results) for results in expected.values()) == HISTORY  # some test had more, and was cut
    assert all(r[0] in ("passed", "failed", "error", "xpass") for results in expected.values() for r in results)


def test_a_report_arriving_late_takes_its_place_in_time_not_the_front(store, npu):
    noon = datetime(2026, 3, 10, 12, tzinfo=UTC)
    newer = job(npu, name="a", head_sha="a" * 40)
    report_with(newer, {ADD: "passed"}, at=noon)
    older = job(npu, name="b", head_sha="b" * 40)
    report_with(older, {ADD: "failed"}, at=noon - timedelta(hours=5))  # parsed after, arrived before

    rows = case_recent.recent_rows({npu.pk: [ADD_ID]}, limit=HISTORY)[npu.pk, ADD_ID]
    assert [(r["status"], r["job_sha"], r["at"]) for r in rows] == [
        ("passed", "a" * 40, noon),
        ("failed", "b" * 40, noon - timedelta(hours=5)),
    ]
    assert [r["status"] for r in case_recent.recent_rows({npu.pk: [ADD_ID]}, limit=1)[npu.pk, ADD_ID]] == ["passed"]
    assert case_recent.recent_rows({npu.pk: ["test_nowhere.py::test_x"]}, limit=HISTORY) == {}


def test_a_pull_requests_report_counts_nowhere(store, npu):
    report_with(job(npu, name="t", event_type="pull_request", pr_number=7), {ADD: "failed"}, at=ago(hours=1))
    assert TestRecent.objects.count() == 0


def test_a_re_parse_takes_the_reports_cases_out_until_it_is_parsed_again(store, npu):
    report = report_with(job(npu, name="t"), {ADD: "failed", MUL: "passed"}, at=ago(days=2))
    report_with(job(npu, name="t2"), {ADD: "passed"}, at=ago(days=2, hours=-1))
    before = recent_rolled_up()

    reparse.reports_reparse(report_ids=[report.pk])
    assert recent_rolled_up() == recent_from_cases()
    assert [r[0] for r in recent_rolled_up()[npu.pk, ADD_ID]] == ["passed"]  # only the other report's
    assert (npu.pk, "test_ops.py::TestOps::test_mul") not in recent_rolled_up()

    assert pull.report_parse(report_id=report.pk) == "parsed"
    after = recent_rolled_up()
    assert after == recent_from_cases()
    assert [r[0] for r in after[npu.pk, ADD_ID]] == [r[0] for r in before[npu.pk, ADD_ID]] == ["passed", "failed"]


def test_jobs_and_backends_deleted_in_the_admin_take_their_cases_out(store, npu, make_backend, admin_client):
    xpu = make_backend("intel/xpu", "L3", device="xpu")
    day = datetime(2026, 3, 10, 9, tzinfo=UTC)
    gone, kept = job(npu, name="gone"), job(npu, name="kept")
    report_with(gone, {ADD: "failed"}, at=day + timedelta(hours=2))
    report_with(kept, {ADD: "passed", MUL: "failed"}, at=day)
    report_with(job(xpu, name="x"), {ADD: "passed"}, at=day)

    response = admin_client.post(reverse("admin:ootci_jobresult_delete", args=[gone.pk]), {"post": "yes"})
    assert response.status_code == 302
    assert recent_rolled_up() == recent_from_cases()
    assert [r[:3] for r in recent_rolled_up()[npu.pk, ADD_ID]] == [("passed", 0, kept.pk)]

    response = admin_client.post(reverse("admin:ootci_backend_delete", args=[npu.pk]), {"post": "yes"})
    assert response.status_code == 302
    assert set(recent_rolled_up()) == {(xpu.pk, ADD_ID)} == set(recent_from_cases())


def test_the_migration_fills_the_roll_up_from_the_cases_of_the_parsed_reports(store, npu, make_backend):
    xpu = make_backend("intel/xpu", "L3", device="xpu")
    noon = datetime(2026, 3, 10, 12, tzinfo=UTC)
    for n in range(HISTORY + 2):
        report_with(
            job(npu if n % 3 else xpu, name=f"t{n}"), {ADD: "failed", MUL: "passed"}, at=noon - n * timedelta(hours=1)
        )
    pending = report_with(job(npu, name="pending"), {"test_x.TestX::test_pending": "passed"}, at=noon)
    reparse.reports_reparse(report_ids=[pending.pk])
    expected = recent_from_cases()
    TestRecent.objects.all().delete()

    importlib.import_module("ootci.migrations.0048_testrecent_fill").fill(apps, None)

    assert recent_rolled_up() == expected
    assert len(expected) == 2 * 2  # two backends, two tests: not the pending report's test


@pytest.mark.django_db(transaction=True)
def test_two_parses_of_one_backend_at_once_lose_neither(store, npu):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite writes one transaction at a time")
    first = report_with(job(npu, name="shard-1"), {ADD: "failed"}, at=ago(hours=2))
    second = report_with(job(npu, name="shard-1", run_attempt=2), {ADD: "passed"}, at=ago(hours=1))
    TestRecent.objects.all().delete()  # as before either parse wrote
    added, go = threading.Event(), threading.Event()

    def parse_first() -> None:
        try:
            with transaction.atomic():
                case_recent.recent_add(first)
                added.set()
                go.wait(10)  # the second parse runs meanwhile, and must wait for this one's commit
        finally:
            connection.close()

    holder = threading.Thread(target=parse_first)
    holder.start()
    assert added.wait(10)
    waiter = threading.Thread(target=lambda: (case_recent.recent_add(second), connection.close()))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive()  # waiting for the backend's lock
    go.set()
    holder.join(10)
    waiter.join(10)

    assert (
        [r[0] for r in recent_rolled_up()[npu.pk, ADD_ID]]
        == ["passed", "failed"]
        == [r[0] for r in recent_from_cases()[npu.pk, ADD_ID]]
    )
