"""The coverage page and its JSON: the skip ledger by test file against peers, skipped over 90 days, changes by
day; its figure on the readiness page and in the evidence export."""

import pytest
from django.utils import timezone

from ootci import governance, ledger
from ootci.models import LevelReview
from tests.hud import builders


@pytest.fixture(autouse=True)
def store(settings, tmp_path):
    settings.TEST_REPORTS_URL = (tmp_path / "reports").as_uri()


def run(backend, sha, cases, *, days_ago):
    job = builders.job(backend, name="test-1", finished=builders.ago(days=days_ago), head_sha=sha, event_type="nightly")
    builders.report_with(job, cases)
    ledger.ledger_record(job_id=job.pk)
    return job


@pytest.fixture
def ledgers(make_backend):
    npu, xpu = make_backend("acme/npu"), make_backend("intel/xpu")
    run(npu, "a" * 40, {"test_ops.T::test_a": "passed", "test_ops.T::test_b": "passed"}, days_ago=3)
    run(
        npu,
        "b" * 40,
        {"test_ops.T::test_a": "passed", "test_ops.T::test_b": "skipped", "test_nn.T::t": "xpass"},
        days_ago=1,
    )
    run(
        xpu,
        "c" * 40,
        {"test_ops.T::test_a": "skipped", "test_ops.T::test_b": "skipped", "test_jit.T::x": "passed"},
        days_ago=1,
    )
    return npu


def test_the_page_shows_files_against_peers_changes_and_the_chart(client, ledgers):
    response = client.get("/oot/acme/npu/coverage/")

    assert response.status_code == 200
    page = response.content.decode()
    assert "test_ops.py" in page and "intel/xpu 100.0% skipped of 2" in page
    assert "test_jit.py" in page and "not run here" in page  # a file only a peer runs
    assert "Started skipping: 1" in page and "<code>test_ops.py::T::test_b</code>" in page
    assert "XPASS (remove from the skip list): 1" in page
    assert 'aria-label="Tests skipped per day over 91 days: from 0 to 1"' in page


def test_the_json_gives_the_same_figures(client, ledgers):
    found = client.get("/api/oot/acme/npu/coverage/").json()

    assert found["totals"]["collected"] == 3 and found["totals"]["skipped"] == 1
    files = {f["file"]: f for f in found["files"]}
    assert files["test_ops.py"]["peers"] == [
        {"repo": "intel/xpu", "collected": 2, "skipped": 2, "skipped_percent": 100.0}
    ]
    assert found["changes"][0]["started_skipping"] == 1 and found["changes"][0]["added"] == 1
    assert found["tests"]["started_skipping"] == ["test_ops.py::T::test_b"]
    assert [p["skipped"] for p in found["series"] if p["skipped"] is not None][-1] == 1


def test_a_day_lists_that_days_changes_and_a_bad_day_is_refused(client, ledgers):
    day = (timezone.now() - timezone.timedelta(days=3)).date().isoformat()

    assert client.get(f"/api/oot/acme/npu/coverage/?day={day}").json()["tests"]["added"] == []
    bad = client.get("/api/oot/acme/npu/coverage/?day=yesterday")
    assert bad.status_code == 400 and "YYYY-MM-DD" in bad.json()["detail"]
    assert client.get("/oot/acme/npu/coverage/?day=2026-02-30").status_code == 400


def test_a_backend_without_ledger_says_how_it_fills(client, make_backend):
    make_backend("acme/npu")

    response = client.get("/oot/acme/npu/coverage/")

    assert response.status_code == 200 and "The ledger fills as soon as" in response.content.decode()
    assert client.get("/oot/acme/none/coverage/").status_code == 404


def test_the_readiness_page_and_json_show_the_coverage_figure(client, ledgers):
    page = client.get("/oot/acme/npu/readiness/").content.decode()

    assert "data-coverage" in page and "1 (33.3%)" in page
    assert client.get("/api/oot/acme/npu/readiness/").json()["coverage"]["collected"] == 3


WINDOW = {"days": 14, "total": 0, "success_rate": None, "test_failure_rate": None, "infra_failure_rate": None}


def test_the_evidence_export_names_hardware_and_coverage(ledgers):
    builders.job(ledgers, name="hw", environment={"device": "Ascend910B", "device_count": 8, "runner": "npu-07"})
    review = LevelReview.objects.create(
        backend=ledgers,
        kind="promotion",
        state="proposed",
        from_level="L2",
        to_level="L3",
        figures={"promotion": WINDOW, "demotion": WINDOW},
        promotion_days=14,
        demotion_days=7,
        verdict="eligible",
    )

    text = governance.evidence_markdown(review)

    assert "Hardware information: 1 of 3 jobs (33.3 %)" in text and "devices: Ascend910B × 8" in text
    assert "3 upstream tests collected, 1 passed, 0 failed, 1 skipped (33.3 %)" in text


def test_the_schema_lists_the_coverage_endpoint(client, db):
    assert "/api/oot/{org}/{repo}/coverage/" in client.get("/api/schema/?format=json").json()["paths"]
