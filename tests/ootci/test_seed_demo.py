import io

import pytest
from django.core.management import call_command
from django.db import transaction
from django.db.models import Count

from ootci.models import Backend, Delivery, Dispatch, JobResult, LedgerFile, LedgerRun, LevelChange, PullRequest
from tests.hud.history.cases_search import days_from_cases, days_rolled_up


def counts() -> dict:
    return {
        model.__name__: model.objects.count()
        for model in (Backend, LevelChange, PullRequest, Delivery, Dispatch, JobResult)
    }


@pytest.fixture(scope="module")
def demo(django_db_setup, django_db_blocker):
    """The demo data, seeded once for this module (a seed takes seconds): each test runs in a savepoint of the
    transaction that holds it and rolls back to it, and the module's end rolls the demo back too."""
    with django_db_blocker.unblock(), transaction.atomic():
        call_command("seed_demo", stdout=io.StringIO())
        yield
        transaction.set_rollback(True)


def test_seed_demo_is_idempotent(demo, db):
    first = counts()
    call_command("seed_demo", stdout=io.StringIO())
    assert counts() == first
    assert days_rolled_up() == days_from_cases() != set()  # the test search's roll-up, as each parse keeps it


def test_seed_demo_covers_what_the_pages_show(demo, db):
    assert Backend.objects.count() >= 12
    assert set(Backend.objects.values_list("level", flat=True)) == {"L1", "L2", "L3", "L4"}
    assert PullRequest.objects.count() >= 200
    conclusions = set(JobResult.objects.values_list("conclusion", flat=True))
    assert {"success", "failure", "cancelled", "timed_out", ""} <= conclusions
    assert JobResult.objects.filter(status="in_progress").exists()
    assert JobResult.objects.filter(run_attempt=2).exists()
    assert JobResult.objects.filter(event_type="nightly", dispatch=None).exists()
    assert JobResult.objects.filter(conclusion="failure").exclude(failed_tests=[]).exists()
    # Dispatches never called back: the HUD counts these as lost.
    assert Dispatch.objects.filter(backend__level__in=["L2", "L3", "L4"]).annotate(n=Count("jobs")).filter(n=0)
    # A re-run keeps its run id: attempts belong to one workflow run.
    rerun = JobResult.objects.filter(run_attempt=2).first()
    assert JobResult.objects.filter(run_id=rerun.run_id, run_attempt=1, job_name=rerun.job_name).exists()
    assert rerun.queue_time is None
    # Where each job ran, and the skip ledger of the baseline runs with a report (the coverage page).
    assert not JobResult.objects.filter(environment={}).exists()
    assert LedgerRun.objects.exists() and LedgerFile.objects.exists()


def test_on_the_demo_no_test_is_flaky_beside_a_flakiness_of_zero(demo, db, settings):
    # The demo PR 160211 showed "flaky" beside "flakiness 0.0 %" on xpu: the badge and the figure now read the same
    # results (ootci.verdicts.flaky_evidence), on every backend of every PR the demo has.
    from hud.failing import queries as failing_queries
    from ootci.models import JobResult

    settings.HUD_CACHE_SECONDS = 0
    prs = set(JobResult.objects.filter(outcome="test", pr_number__isnull=False).values_list("pr_number", flat=True))
    flaky = 0
    for number in sorted(prs):
        for found in failing_queries.pr_failing_tests(number) or []:
            for t in found.tests:
                if t.flaky:
                    flaky += 1
                    assert t.flakiness, (number, found.backend.repo, t.test_id, t.flaky_why)
                    assert t.flaky_why
    assert flaky  # the demo has flaky tests to show
