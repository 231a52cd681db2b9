"""Sick runners (ootci.runners): a runner failing significantly more than its backend over 24 h, at least 10 jobs;
the sick_runner incident and the infra-candidate evidence."""

from datetime import timedelta

from django.utils import timezone

from ootci import runners
from ootci.models import AlertRule, Incident
from relay.alerts import incidents
from tests.hud import builders
from tests.relay.alerts.test_incidents import rules_installed


def fleet(backend, *, bad_failures: int, bad_jobs: int = 12, good_jobs: int = 40, good_failures: int = 2):
    jobs = []
    for i in range(bad_jobs):
        conclusion = "failure" if i < bad_failures else "success"
        env = {"runner": "npu-07", "runner_labels": ["npu"]}
        jobs.append(builders.job(backend, name=f"b{i}", conclusion=conclusion, environment=env))
    for i in range(good_jobs):
        conclusion = "failure" if i < good_failures else "success"
        env = {"runner": f"npu-{i % 4:02d}", "runner_labels": ["npu"]}
        jobs.append(builders.job(backend, name=f"g{i}", conclusion=conclusion, environment=env))
    return jobs


def test_wilson_lower_bound():
    assert runners.wilson_lower(0, 10) == 0.0
    assert 0.45 < runners.wilson_lower(90, 100, z=1.96) < 0.9


def test_a_runner_failing_far_more_than_its_backend_is_flagged_and_works_elsewhere(make_backend):
    backend = make_backend("acme/npu")
    fleet(backend, bad_failures=9)

    found = runners.sick_runners([backend.pk])[backend.pk]

    assert [s.key for s in found] == ["runner:npu-07"]  # the shared label is as healthy as the backend
    assert found[0].text.startswith("9 of 11 failures on runner npu-07 (9 of its 12 jobs in 24 h, 75 %")
    assert found[0].text.endswith("works elsewhere (2 of 40 failed)")


def test_a_runner_with_fewer_than_ten_jobs_or_within_the_noise_is_not(make_backend):
    backend = make_backend("acme/npu")
    fleet(backend, bad_failures=9, bad_jobs=9)
    other = make_backend("acme/xpu")
    fleet(other, bad_failures=2, good_failures=4)

    assert runners.sick_runners([backend.pk, other.pk]) == {}


def test_jobs_older_than_24_hours_do_not_count(make_backend):
    backend = make_backend("acme/npu")
    for job in fleet(backend, bad_failures=9):
        if job.job_name.startswith("b"):
            type(job).objects.filter(pk=job.pk).update(completed_at=builders.ago(hours=25))

    assert runners.sick_runners([backend.pk]) == {}


def test_a_sick_runner_opens_an_incident_and_resolves_when_it_recovers(make_backend):
    rules_installed()  # a transactional test's flush before this one removes the migration's rules
    backend = make_backend("acme/npu")
    jobs = fleet(backend, bad_failures=9)

    assert incidents.runners_evaluate(backend) == {"opened": 1}
    incident = Incident.objects.get(rule__kind=AlertRule.Kind.SICK_RUNNER)
    assert incident.fingerprint == f"sick_runner:{backend.pk}:runner:npu-07"
    assert incident.details["failures"] == 9 and "works elsewhere" in incident.what
    failed = next(j for j in jobs if j.job_name == "b0")
    assert runners.infra_candidate(failed.pk, failed.environment, runners.sick_runners([backend.pk])[backend.pk])

    type(failed).objects.filter(job_name__startswith="b").update(conclusion="success")

    assert incidents.runners_evaluate(backend) == {"resolved": 1}


def test_the_schedule_resolves_a_sick_runner_whose_failures_left_the_day_without_a_new_job(make_backend):
    rules_installed()
    backend = make_backend("acme/npu")
    fleet(backend, bad_failures=9)
    assert incidents.runners_evaluate(backend) == {"opened": 1}

    assert incidents.periodic_evaluate()["runners"] == 0  # still sick: it keeps firing
    assert incidents.periodic_evaluate(now=timezone.now() + timedelta(hours=25))["runners"] == 1

    assert Incident.objects.get(rule__kind=AlertRule.Kind.SICK_RUNNER).state == Incident.State.RESOLVED
