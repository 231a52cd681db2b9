"""Expected-outcome jobs (issue 26): a job named ``xfail``, ``xcancel`` or ``xtimeout`` counts as a success when it
fails, is cancelled or times out, and as a failure otherwise — in every figure that counts successes, in both stores."""

import pytest
from django.utils import timezone

from hud.figures import queries
from hud.stores.clickhouse.copy_jobs import replicate
from ootci.models import JobResult
from tests.hud.builders import job
from tests.hud.stores.test_clickhouse_parity import assert_same_figures

pytestmark = pytest.mark.django_db

# job name, conclusion → outcome
CASES = [
    ("xfail", "failure", "success"),
    ("xcancel", "cancelled", "success"),
    ("xtimeout", "timed_out", "success"),
    ("xfail (2, 3)", "failure", "success"),
    ("probe-XTIMEOUT", "timed_out", "success"),
    ("xfail-again", "success", "infra"),  # an expected failure that passed: the path it probes is broken
    ("xcancel", "failure", "infra"),
    ("xtimeout", "success", "infra"),
    ("noxfailure", "failure", "infra"),  # "xfail" inside another word is no expected-outcome job
    ("build", "timed_out", "infra"),
]


def test_the_outcome_of_each_expected_outcome_job(make_backend):
    backend = make_backend("probe/crcr-test", "L2")
    for i, (name, conclusion, _) in enumerate(CASES):
        job(backend, name=name, conclusion=conclusion, head_sha=f"{i:040d}")

    found = {(j.job_name, j.conclusion): j.outcome for j in JobResult.objects.all()}

    assert found == {(name, conclusion): outcome for name, conclusion, outcome in CASES}


def history(make_backend):
    """Four pull-request jobs on one PR head: three met their expected outcome, one xfail passed (a failure)."""
    backend = make_backend("probe/crcr-test", "L3")
    for name, conclusion in (("xfail", "failure"), ("xcancel", "cancelled"), ("xtimeout", "timed_out")):
        job(backend, name=name, conclusion=conclusion, event_type="pull_request", pr_number=7, head_sha="a" * 40)
    job(backend, name="xfail-2", conclusion="success", event_type="pull_request", pr_number=7, head_sha="a" * 40)
    return backend


def test_every_success_figure_counts_them(make_backend):
    backend = history(make_backend)

    stats = queries.backend_stats(days=7, event="pull_request", now=timezone.now())[backend.id]
    assert (stats.counts.successes, stats.counts.infra_failures, stats.counts.timed_out) == (3, 1, 0)
    assert stats.counts.pass_rate == 75.0
    days = queries.daily_pass_rates(days=7, event="pull_request", now=timezone.now())[backend.id]
    assert [(d.successes, d.total) for d in days if d.total] == [(3, 4)]  # their day: yesterday just after midnight
    r = queries.readiness(now=timezone.now())[backend.id]
    assert (r.demotion.success_rate, r.demotion.timeout_rate) == (75.0, 0.0)  # an expected timeout is no timeout
    matrix = queries.backend_matrix(backend_id=backend.id, days=7, event="pull_request", failing_only=True)
    assert [row.sha for row in matrix.rows] == ["a" * 40]  # one failure: the xfail that passed
    assert {c: j.outcome for c, j in matrix.rows[0].cells.items()}["ci / xfail"] == "success"


def test_clickhouse_counts_them_as_postgresql_does(make_backend, settings, tmp_path):
    backend = history(make_backend)
    url = f"chdb://{tmp_path / 'clickhouse'}"
    settings.CLICKHOUSE_URL = url
    replicate()

    found = assert_same_figures(settings, url, backend_ids=[backend.id], pages=(1,))

    assert found["stats", 7, "pull_request", backend.id][backend.id].counts.successes == 3
