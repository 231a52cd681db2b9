"""The backend badge: level and pass rate as SVG, parameters as on the pages, cached 60 s; its Markdown on the page."""

import uuid

import pytest
from django.core.cache import cache

from tests.hud.builders import job

pytestmark = pytest.mark.django_db


@pytest.fixture
def repo(make_backend):
    name = f"badge-{uuid.uuid4().hex[:8]}/npu"  # its own URL: cached responses are keyed by URL
    backend = make_backend(name, "L3", device="npu")
    yield backend
    cache.clear()


def pr(backend, name, conclusion="success"):
    job(backend, name=name, conclusion=conclusion, event_type="pull_request", pr_number=1, head_sha="1" * 40)


def test_the_badge_shows_level_and_pass_rate(client, repo):
    pr(repo, "a")
    pr(repo, "b", "failure")

    response = client.get(f"/oot/{repo.repo}/badge.svg")

    assert response["Content-Type"].startswith("image/svg+xml")
    svg = response.content.decode()
    assert "L3 · 50%" in svg and "#c0392b" in svg  # 50 % is poor
    assert "pass rate of pull_request jobs over 7 days" in svg


def test_the_badge_takes_window_and_event(client, repo):
    pr(repo, "a")
    job(repo, name="n", conclusion="failure", event_type="nightly")

    nightly = client.get(f"/oot/{repo.repo}/badge.svg?event=nightly&days=30").content.decode()

    assert "L3 · 0%" in nightly and "nightly jobs over 30 days" in nightly


def test_the_badge_is_cached_for_60_seconds(client, repo):
    pr(repo, "a")
    first = client.get(f"/oot/{repo.repo}/badge.svg")
    pr(repo, "b", "failure")

    again = client.get(f"/oot/{repo.repo}/badge.svg")

    assert again.content == first.content and "L3 · 100%" in again.content.decode()
    assert "max-age=60" in again["Cache-Control"]


def test_a_badge_without_data_says_so(client, repo):
    assert "L3 · no data" in client.get(f"/oot/{repo.repo}/badge.svg").content.decode()


def test_the_backend_page_gives_the_markdown_to_embed_it(client, repo):
    html = client.get(f"/oot/{repo.repo}/").content.decode()

    page = f"http://testserver/oot/{repo.repo}/"
    assert f"[![OOT CI]({page}badge.svg)]({page})" in html


def test_an_unknown_backend_has_no_badge(client, db):
    assert client.get("/oot/no/such/badge.svg").status_code == 404
