"""The job page and the PR page show the parsed test report: every failing test with its message (long ones
folded), reruns marked; the PR page lists the first failed tests from the report."""

import io

import pytest

from relay.reports import pull
from tests.hud import builders
from tests.relay.report_files import junit_xml

pytestmark = pytest.mark.django_db

LONG = "x = 1\n" * 40


def report_of(job, data: bytes, capture) -> None:
    with capture(execute=True):
        received = pull.spooled(io.BytesIO(data), limit=10**8)
        pull.report_store(job=job, received=received, source="upload")


@pytest.fixture
def npu(make_backend, settings, tmp_path):
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    return make_backend(repo="acme/npu", level="L2", device="npu")


def test_the_job_page_lists_every_failed_test_with_its_message(client, npu, django_capture_on_commit_callbacks):
    job = builders.job(npu, name="test-1", conclusion="failure")
    xml = junit_xml(passed=50, failed=2, reruns=1).replace(b"Traceback (most recent call last):", LONG.encode())
    report_of(job, xml, django_capture_on_commit_callbacks)

    html = client.get(f"/oot/acme/npu/jobs/{job.id}/").content.decode()

    assert "Test report" in html and "52 tests · 50 passed" in html
    assert "Failed and errored tests (2)" in html
    assert html.count("test_ops.py::TestCommon{DEVICE}::test_mul_{device}_int") >= 2
    assert "<details><summary>" in html  # the long message is folded
    assert "rerun ×1" in html
    assert "AssertionError: 1 != 2" in html


def test_a_refused_report_says_why_on_the_job_page(client, npu, django_capture_on_commit_callbacks):
    job = builders.job(npu, name="test-1", conclusion="failure")
    report_of(job, b"<html>no</html>", django_capture_on_commit_callbacks)
    html = client.get(f"/oot/acme/npu/jobs/{job.id}/").content.decode()
    assert "refused" in html and "not JUnit" in html


def test_the_pr_page_shows_the_first_failed_tests_from_the_report_with_their_messages_folded(
    client, npu, django_capture_on_commit_callbacks
):
    pr = builders.pull_request(7, "a" * 40)
    dispatch = builders.dispatch(npu, sha="a" * 40, at=builders.ago(hours=2), pr=pr)
    job = builders.job(npu, name="test-1", conclusion="failure", dispatch_=dispatch)
    report_of(job, junit_xml(passed=10, failed=5), django_capture_on_commit_callbacks)

    html = client.get("/oot/pr/7/").content.decode()

    listed = html.split('aria-label="First failed tests of ci / test-1"')[1].split("</ul>")[0]
    assert listed.count("<code>") == 3  # the first three of five
    assert "test_ops.py::TestCommon{DEVICE}::test_mul_{device}_int0" in listed
    assert "test_mul_{device}_int3" not in listed
    assert "<details><summary>" in listed and "AssertionError: 0 != 1" in listed  # the message, folded
    assert "all 5 failed tests" in listed


def test_the_pr_page_falls_back_to_the_callbacks_failed_tests_without_a_report(client, npu):
    pr = builders.pull_request(8, "b" * 40)
    dispatch = builders.dispatch(npu, sha="b" * 40, at=builders.ago(hours=2), pr=pr)
    names = [f"test_a.py::test_{i}" for i in range(4)]
    builders.job(npu, name="test-1", conclusion="failure", dispatch_=dispatch, failed=4, failed_tests=names)

    html = client.get("/oot/pr/8/").content.decode()

    listed = html.split('aria-label="First failed tests of ci / test-1"')[1].split("</ul>")[0]
    assert listed.count("<code>") == 3 and "test_a.py::test_0" in listed and "<details>" not in listed
    assert "all 4 failed tests" in listed


def test_the_api_gives_the_reports_and_failing_tests(client, npu, django_capture_on_commit_callbacks):
    job = builders.job(npu, name="test-1", conclusion="failure")
    report_of(job, junit_xml(passed=3, failed=1, reruns=2), django_capture_on_commit_callbacks)

    data = client.get(f"/api/oot/acme/npu/jobs/{job.id}/tests/").json()

    assert data["parsed"] is True
    assert [(r["state"], r["cases"], r["reruns"]) for r in data["reports"]] == [("parsed", 4, 2)]
    assert [(c["test_id"], c["status"], c["reruns"]) for c in data["failing"]] == [
        ("test_ops.py::TestCommon{DEVICE}::test_mul_{device}_int0", "failed", 2)
    ]
    assert client.get("/api/oot/acme/npu/jobs/999999/tests/").status_code == 404
    schema = client.get("/api/schema/").content.decode()
    assert "oot_job_tests" in schema and "github_test_report" in schema


def test_a_job_failing_hundreds_of_tests_is_paged_with_a_count_and_a_cursor(
    client, npu, django_capture_on_commit_callbacks
):
    job = builders.job(npu, name="test-1", conclusion="failure")
    report_of(job, junit_xml(passed=5, failed=450), django_capture_on_commit_callbacks)
    url = f"/api/oot/acme/npu/jobs/{job.id}/tests/"

    pages, after = [], 0
    while after is not None:
        data = client.get(url, {"after": after}).json()
        assert data["failing_total"] == 450
        pages.append([c["test_id"] for c in data["failing"]])
        after = data["next_after"]

    assert [len(p) for p in pages] == [200, 200, 50]
    assert len({t for p in pages for t in p}) == 450  # every failing test once, in report order
    html = client.get(f"/oot/acme/npu/jobs/{job.id}/").content.decode()
    assert "Failed and errored tests (450)" in html and "200 shown" in html and "data-next-page" in html
    bad = client.get(url, {"after": "soon"})
    assert bad.status_code == 400 and "page cursor" in bad.json()["detail"]
    assert client.get(f"/oot/acme/npu/jobs/{job.id}/", {"after": "-1"}).status_code == 400
