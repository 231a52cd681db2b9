import pytest
import yaml
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ootci.models import JobFailure
from tests.hud import scenario

pytestmark = pytest.mark.django_db


def get_json(client, url, status=200):
    response = client.get(url)
    assert response.status_code == status, response.content[:300]
    return response.json()


def test_the_overview_api_gives_the_hand_counted_figures(client):
    s = scenario.build()

    data = get_json(client, "/api/oot/?days=7")

    (row,) = data["sections"]["L2"]
    counts = row["stats"]["counts"]
    assert row["backend"]["repo"] == s.backend.repo
    assert (counts["successes"], counts["test_failures"], counts["infra_failures"], counts["lost"]) == (2, 1, 3, 1)
    assert (counts["total"], counts["pass_rate"]) == (6, 33.3)
    assert row["readiness"]["verdict"] == "not-yet"
    assert len(row["spark"]) == 14
    assert data["relay"]["dispatches_lost"] == 1


def test_bad_api_parameters_fall_back_to_defaults(client):
    scenario.build()

    data = get_json(client, "/api/oot/?days=999&event=nope")

    assert (data["days"], data["event"]) == (7, "pull_request")


def test_the_backend_api_gives_cards_and_matrix(client):
    s = scenario.build()

    data = get_json(client, "/api/oot/acme/npu/?days=30")

    assert data["stats"]["counts"]["pass_rate"] == 42.9
    assert [r["pr_number"] for r in data["matrix"]["rows"]] == [101, 103, 102]
    assert data["matrix"]["rows"][0]["cells"]["ci / build"]["id"] == s.rerun.id


def test_the_pr_job_and_metrics_apis(client):
    s = scenario.build()

    assert get_json(client, "/api/oot/pr/101/")["summary"]["passed"] == 2
    job = get_json(client, f"/api/oot/acme/npu/jobs/{s.test_failure.id}/")
    assert job["job"]["failed_tests"] == ["test/test_ops.py::test_a"]
    assert job["job"]["outcome"] == "test"
    metrics = get_json(client, "/api/oot/metrics/?days=7")
    assert len(metrics["series"][0]["days"]) == 7


@pytest.mark.parametrize("url", ["/api/oot/pr/5/", "/api/oot/no/such/", "/api/oot/acme/npu/jobs/0/"])
def test_unknown_things_are_404_in_the_api(client, url):
    scenario.build()

    assert "detail" in get_json(client, url, status=404)


def test_the_allowlist_exports_as_json_and_yaml(client, make_backend):
    make_backend("org/l4", "L4", oncalls=["a"])
    make_backend("org/l3", "L3", device="npu")

    as_json = get_json(client, "/api/oot/allowlist/")
    response = client.get("/api/oot/allowlist/?format=yaml")

    assert as_json["L3"] == {"npu": {"org/l3": []}}
    assert response["Content-Type"].startswith("application/yaml")
    assert yaml.safe_load(response.content) == as_json


def test_the_openapi_schema_lists_the_hud_api(client, db):
    response = client.get("/api/schema/?format=json")

    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in (
        "/api/oot/",
        "/api/oot/{org}/{repo}/",
        "/api/oot/pr/{number}/",
        "/api/oot/metrics/",
        "/api/oot/allowlist/",
    ):
        assert path in paths


def test_the_overview_api_query_count_is_pinned(client):
    scenario.build()

    with CaptureQueriesContext(connection) as captured:
        get_json(client, "/api/oot/")

    assert len(captured) == 9  # as the /oot/ page


def test_the_job_api_says_why_the_attempt_failed_as_the_page_does(client):
    s = scenario.build()
    assert get_json(client, f"/api/oot/acme/npu/jobs/{s.test_failure.id}/")["failure"] is None  # not classified yet
    s.test_failure.run_url = "https://github.com/acme/npu/actions/runs/77"
    s.test_failure.save()
    JobFailure.objects.create(
        job=s.test_failure,
        failure_class="test",
        source=JobFailure.Source.RULE,
        rule_name="pytest failed test",
        rule_class="test",
        line="FAILED test/test_ops.py::test_a - AssertionError",
        line_number=212,
        failed_step="Run tests",
        failed_step_number=4,
        step_number=4,
        step_line=9,
        github_job_id=555,
    )

    failure = get_json(client, f"/api/oot/acme/npu/jobs/{s.test_failure.id}/")["failure"]

    assert (failure["failure_class"], failure["source"], failure["rule_name"]) == ("test", "rule", "pytest failed test")
    assert (failure["line"], failure["line_number"]) == ("FAILED test/test_ops.py::test_a - AssertionError", 212)
    assert failure["failed_step"] == "Run tests"
    html = client.get(f"/oot/acme/npu/jobs/{s.test_failure.id}/").content.decode()
    assert failure["line"] in html and failure["source_text"] in html
    assert failure["line_url"] == "https://github.com/acme/npu/actions/runs/77/job/555#step:4:9"
    assert failure["line_url"] in html  # the page links the same line
