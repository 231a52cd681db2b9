"""Hostile input to the HUD side: Unicode digits in query strings, and CRCR ingest bodies PostgreSQL cannot store."""

import json

import pytest

from ootci.models import JobResult
from tests.hud import scenario
from tests.relay.endpoints.test_ingest import forwarded, post

pytestmark = pytest.mark.django_db

# str.isdigit() is true for each of these; int() refuses the first two and reads the third as 30.
UNICODE_DIGITS = ["²", "³", "٣٠"]


@pytest.mark.parametrize("digits", [*UNICODE_DIGITS, "1" * 5000])
@pytest.mark.parametrize("page", ["/oot/", "/oot/acme/npu/"])
def test_pages_read_only_ascii_digits(client, page, digits):
    scenario.build()

    response = client.get(f"{page}?days={digits}&page={digits}")

    assert response.status_code == 200
    assert "33.3%" in response.content.decode()  # the default 7-day window, as for any other bad value


@pytest.mark.parametrize("digits", [*UNICODE_DIGITS, "1" * 5000])
def test_the_api_reads_only_ascii_digits(client, digits):
    scenario.build()

    overview = client.get(f"/api/oot/?days={digits}")
    backend = client.get(f"/api/oot/acme/npu/?days={digits}&page={digits}")
    metrics = client.get(f"/api/oot/metrics/?days={digits}")

    assert (overview.status_code, backend.status_code, metrics.status_code) == (200, 200, 200)
    assert (backend.json()["days"], metrics.json()["days"]) == (7, 30)
    assert backend.json()["matrix"]["page"] == 1


def test_the_pr_box_ignores_unicode_digits(client):
    response = client.get("/oot/pr/?number=²")

    assert response.status_code == 302
    assert response.url == "/oot/"


@pytest.fixture
def ingest_on(make_backend, settings):
    settings.HUD_INGEST_TOKEN = "hud-bot-token-for-tests"
    return make_backend(repo="ascend/pytorch-npu", level="L3")


def _workflow(**fields) -> dict:
    body = forwarded("pull_request.completed.failure")
    body["untrusted"]["callback_payload"]["workflow"].update(fields)
    return body


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (_workflow(name="npu\x00ci"), "The body's untrusted.callback_payload.workflow.name holds a NUL character."),
        (_workflow(conclusion="\ud800"), "The body's untrusted.callback_payload.workflow.conclusion holds a lone"),
        (_workflow(completed_at="2024-02-30T10:00:00Z"), "untrusted.callback_payload.workflow.completed_at: "),
        (_workflow(started_at="2024-02-01T25:00:00Z"), "untrusted.callback_payload.workflow.started_at: "),
        (_workflow(test_results={"passed": 2**31}), "untrusted.callback_payload.workflow.test_results.passed: "),
    ],
)
def test_an_ingest_body_postgresql_cannot_store_is_refused(client, ingest_on, body, detail):
    response = post(client, body)

    assert response.status_code == 400
    assert response.json()["detail"].startswith(detail), response.json()
    assert not JobResult.objects.exists()


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        ('{"trusted": {"ci_metrics": {"queue_time": NaN}}}', "NaN is not a JSON number"),
        ('{"trusted": {"ci_metrics": {"queue_time": Infinity}}}', "Infinity is not a JSON number"),
        ('{"untrusted": ' * 80 + "1" + "}" * 80, "The body is JSON nested too deeply"),
        (json.dumps(json.dumps({"untrusted": "\x00"})), "The body's untrusted holds a NUL character"),
    ],
)
def test_an_ingest_body_with_nan_deep_nesting_or_nul_is_refused(client, ingest_on, raw, detail):
    response = post(client, raw)

    assert response.status_code == 400
    assert detail in response.json()["detail"]
    assert not JobResult.objects.exists()


@pytest.mark.parametrize("url", ["/api/oot/a/b/c/d/", "/api/nothing", "/github/nothing"])
def test_an_unknown_api_or_relay_url_is_a_json_404(client, url):
    response = client.get(url)

    assert response.status_code == 404
    assert response.json() == {"detail": f"Not found: {url}"}


def test_an_unknown_page_is_an_html_404(client):
    response = client.get("/oot/a/b/c/d/")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
