"""The failing-tests view on the backend page (?view=failing-tests), the PR page's classes and summary line, their
JSON (/api/oot/<org>/<repo>/failing-tests/, /api/oot/pr/<n>/) and bad input: 4xx, never 500."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ootci.models import TestCase
from tests.hud.failing.test_classes import build_pr, history, npu, xpu  # noqa: F401 - fixtures
from tests.hud.failing_history import BASE, HEAD, generic_id

pytestmark = pytest.mark.django_db


@pytest.fixture
def pr(history, npu, xpu):  # noqa: F811
    return build_pr(history, npu, xpu)


def test_the_pr_page_counts_new_failures_apart_and_classifies_each_backend(client, pr):
    html = client.get("/oot/pr/7/").content.decode()

    assert "Failing tests: 3 new failures on npu, 2 flaky, 1 broken-baseline" in html
    assert "1 new failure on xpu (no baseline)" in html
    assert html.count(f'data-test="{generic_id("t_only")}"') == 1
    assert 'data-class="only here"' in html and 'data-verdict="flaky"' in html and 'data-verdict="new"' in html
    assert f"/pytorch/pytorch/commit/{BASE}" in html and "the run on the PR&#x27;s base commit" in html
    assert "no baseline" in html


def test_the_pr_page_keeps_its_classification_until_a_result_of_the_head_changes(client, pr, history, npu, settings):  # noqa: F811
    settings.HUD_CACHE_SECONDS = 60
    assert "3 new failures on npu, 2 flaky, 1 broken-baseline" in client.get("/oot/pr/7/").content.decode()

    # The baseline had t_new failing after all: the head's results are unchanged, so the page still says 3 new ...
    on_base = TestCase.objects.filter(job__backend=npu, job__job_sha=BASE, test_id=generic_id("t_new"))
    assert on_base.update(status="failed") == 1
    assert "3 new failures on npu, 2 flaky, 1 broken-baseline" in client.get("/oot/pr/7/").content.decode()
    # ... until a result of the head arrives (a job, or a report parsed again), which classifies again.
    history.pr_job(npu, pr, {"t_ok": "passed"}, name="test-4")
    assert "2 new failures on npu, 2 flaky, 2 broken-baseline" in client.get("/oot/pr/7/").content.decode()
    # Without the cache every request classifies.
    settings.HUD_CACHE_SECONDS = 0
    assert on_base.update(status="passed") == 1
    assert "3 new failures on npu, 2 flaky, 1 broken-baseline" in client.get("/oot/pr/7/").content.decode()


def test_the_backend_page_links_its_failing_tests_view(client, npu):  # noqa: F811
    html = client.get("/oot/acme/npu/").content.decode()
    assert 'href="?view=failing-tests"' in html


def test_the_failing_tests_view_of_a_pr_head_lists_each_test_with_its_classes(client, pr):
    response = client.get("/oot/acme/npu/?view=failing-tests&pr=7")

    html = response.content.decode()
    assert response.status_code == 200
    assert "3 new failures on npu, 2 flaky, 1 broken-baseline" in html and "1 only here · 2 flaky" in html
    assert html.count("<tr data-test=") == 6
    assert 'href="?view=failing-tests&amp;pr=7"' in html  # the recent PRs with a test failure


def test_the_failing_tests_view_defaults_to_the_latest_nightly_or_push_run(client, pr):
    html = client.get("/oot/acme/npu/?view=failing-tests").content.decode()

    assert "Nightly run" in html and BASE[:7] in html
    assert html.count("<tr data-test=") == 1  # t_old, failing on the BASE nightly
    assert "no baseline" in html  # nothing ran before it


def test_a_backend_without_runs_says_so(client, make_backend):
    make_backend(repo="quiet/tpu", level="L2")
    html = client.get("/oot/quiet/tpu/?view=failing-tests").content.decode()
    assert "No nightly or push run with a test report yet" in html


@pytest.mark.parametrize("value", ["abc", "-1", "0", "99999999999999999999", "٣"])
def test_a_bad_pr_number_is_a_friendly_400_page(client, npu, value):  # noqa: F811
    response = client.get("/oot/acme/npu/", {"view": "failing-tests", "pr": value})
    assert response.status_code == 400
    assert "is not a pull request number" in response.content.decode()


def test_an_unknown_pr_is_a_404_page_and_an_unknown_backend_the_404_page(client, npu):  # noqa: F811
    response = client.get("/oot/acme/npu/?view=failing-tests&pr=4242")
    assert response.status_code == 404 and "No pull request #4242 has been relayed" in response.content.decode()
    assert client.get("/oot/no/such/?view=failing-tests").status_code == 404


def test_the_api_gives_the_classes_and_the_baseline(client, pr):
    data = client.get("/api/oot/acme/npu/failing-tests/?pr=7").json()

    assert (data["sha"], data["pr_number"], data["total"], data["new"], data["already_failing"]) == (HEAD, 7, 6, 3, 1)
    assert data["baseline"]["sha"] == BASE and data["baseline"]["rule"] == "base"
    assert data["backend"]["repo"] == "acme/npu"
    tests = {t["test_id"]: t for t in data["tests"]}
    only = tests[generic_id("t_only")]
    assert only["classes"] == ["passed on baseline", "only here"] and only["elsewhere"] == "passes"
    assert only["verdict"] == "new" and only["new"] is True and data["verdict"] == "new"
    flaky = tests[generic_id("t_rerun")]
    assert flaky["flaky_why"] == ["passed on rerun", "passed and failed at one SHA"]
    assert tests[generic_id("t_old")]["flakiness"] == 0.0 and tests[generic_id("t_new")]["flakiness_pct"] == 100.0


def test_the_api_says_no_baseline(client, pr):
    data = client.get("/api/oot/intel/xpu/failing-tests/?pr=7").json()
    assert data["baseline"] is None and data["tests"][0]["classes"] == ["no baseline"]
    assert data["tests"][0]["verdict"] == "new"  # no baseline can clear it


def test_the_pr_api_carries_each_backends_failing_tests(client, pr):
    data = client.get("/api/oot/pr/7/").json()

    assert data["failing_summary"].startswith("3 new failures on npu, 2 flaky, 1 broken-baseline")
    by_repo = {f["backend"]["repo"]: f for f in data["failing_tests"]}
    assert by_repo["acme/npu"]["baseline"]["sha"] == BASE and by_repo["intel/xpu"]["baseline"] is None
    assert data["head_sha"] == HEAD and data["groups"]  # the PR detail is still there


@pytest.mark.parametrize("query", ["pr=abc", "pr=0", "pr=1.5", "pr=%00"])
def test_the_api_refuses_a_bad_pr_with_400_json(client, npu, query):  # noqa: F811
    response = client.get(f"/api/oot/acme/npu/failing-tests/?{query}")
    assert response.status_code == 400
    assert "pr must be a pull request number" in response.json()["detail"]


def test_the_api_answers_404_json_for_unknown_backends_and_prs(client, npu):  # noqa: F811
    assert client.get("/api/oot/no/such/failing-tests/").json()["detail"] == "no/such is not an allowlisted backend"
    response = client.get("/api/oot/acme/npu/failing-tests/?pr=4242")
    assert response.status_code == 404 and "4242" in response.json()["detail"]


def test_the_endpoints_are_in_the_openapi_schema(client):
    schema = client.get("/api/schema/?format=json").json()
    path = schema["paths"]["/api/oot/{org}/{repo}/failing-tests/"]["get"]
    assert path["operationId"] == "oot_failing_tests"
    assert any(p["name"] == "pr" for p in path["parameters"])
    components = schema["components"]["schemas"]
    assert {"BackendFailing", "FailingTest", "Baseline", "PullRequestDetail"} <= set(components)
    assert "failing_tests" in components["PullRequestDetail"]["properties"]


def test_more_backends_do_not_mean_more_queries_on_the_pr_page(client, pr, history, make_backend):  # noqa: F811
    def count() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/oot/pr/7/").status_code == 200
        return len(captured)

    before = count()
    for repo in ("apple/mps", "aws/neuron"):
        more = make_backend(repo=repo, level="L2")
        history.baseline(more, {"t_new": "passed"}, sha=BASE, hours=9)
        history.pr_job(more, pr, {"t_new": "failed"})

    assert count() == before
    assert "1 new failure on mps" not in client.get("/oot/pr/7/").content.decode()  # no device
    assert "1 new failure on apple/mps" in client.get("/oot/pr/7/").content.decode()
