"""The failure rules and job classifications in the admin."""

import pytest

from ootci.models import FailureRule, JobFailure, JobResult

pytestmark = pytest.mark.django_db


def rule_form(**fields) -> dict:
    form = {"name": "npu firmware", "regex": r"NPU firmware error (\w+)", "failure_class": "infra", "priority": "50"}
    return form | {"backend": "", "enabled": "on", "notes": ""} | fields


def test_rules_are_searched_and_filtered_by_class_backend_and_enabled(admin_client, make_backend):
    FailureRule.objects.all().delete()  # the default rules the migration installs
    npu = make_backend("org/npu")
    FailureRule.objects.create(name="npu driver", regex="NPU driver", failure_class="infra", backend=npu)
    FailureRule.objects.create(name="npu compile", regex="npu-cc: error", failure_class="build", backend=npu)
    FailureRule.objects.create(name="pip timeout", regex="ReadTimeoutError", failure_class="infra")
    FailureRule.objects.create(name="npu old", regex="NPU old", failure_class="infra", backend=npu, enabled=False)

    def listed(**query) -> list[str]:
        response = admin_client.get("/admin/ootci/failurerule/", query)
        assert response.status_code == 200
        return sorted(rule.name for rule in response.context["cl"].result_list)

    assert listed(failure_class__exact="infra", backend__id__exact=npu.pk) == ["npu driver", "npu old"]
    assert listed(failure_class__exact="infra", enabled__exact="1") == ["npu driver", "pip timeout"]
    assert listed(q="timeout") == ["pip timeout"]


def test_a_rule_is_added_and_edited(admin_client):
    response = admin_client.post("/admin/ootci/failurerule/add/", rule_form())
    assert response.status_code == 302, response.context["adminform"].form.errors
    rule = FailureRule.objects.get(name="npu firmware")

    response = admin_client.post(f"/admin/ootci/failurerule/{rule.pk}/change/", rule_form(priority="70"))

    assert response.status_code == 302
    rule.refresh_from_db()
    assert (rule.priority, rule.failure_class, rule.enabled) == (70, "infra", True)


@pytest.mark.parametrize(
    ("regex", "says"),
    [("NPU (firmware", "Not a valid regular expression"), ("x*", "it would match every log")],
)
def test_a_bad_regex_is_refused_on_its_field(admin_client, regex, says):
    response = admin_client.post("/admin/ootci/failurerule/add/", rule_form(regex=regex))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["regex"] and says in errors["regex"][0]
    assert not FailureRule.objects.filter(name="npu firmware").exists()


def test_job_failures_are_listed_and_not_editable(admin_client, make_backend):
    backend = make_backend("org/npu", level="L2")
    job = JobResult.objects.create(
        backend=backend, delivery_id="d-1", workflow_name="ci", job_name="test", run_id="1", run_attempt=1
    )
    failure = JobFailure.objects.create(job=job, failure_class="infra", source="rule", line="No space left on device")

    listed = admin_client.get("/admin/ootci/jobfailure/", {"q": "space left"})
    change = admin_client.post(f"/admin/ootci/jobfailure/{failure.pk}/change/", {"failure_class": "test"})

    assert listed.status_code == 200 and "No space left on device" in listed.content.decode()
    assert [f.pk for f in listed.context["cl"].result_list] == [failure.pk]
    assert change.status_code == 403
    assert admin_client.get("/admin/ootci/jobfailure/add/").status_code == 403
