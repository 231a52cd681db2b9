"""What each HUD page costs a browser, with the demo data (``manage.py seed_demo``), in headless Chromium:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ootci .venv/bin/pytest -s -p no:xdist tests/bench/bench_hud_pages.py

Prints per page: requests, bytes over the wire (the page gzipped by GZipMiddleware; static files as gzip would
send them, since the test server does not compress them), the refresh fragment's gzipped bytes, and
DOMContentLoaded (median of 5 loads, after one warm-up).
"""

import gzip
import statistics
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from tests.e2e.test_hud_pages import demo_pages

pytestmark = pytest.mark.django_db(transaction=True)
STATIC = Path(settings.BASE_DIR)


def static_gzip_bytes(url: str) -> int:
    """The gzipped size of a static file (HUD or sidecar), as a compressing proxy would send it."""
    relative = url.split("/static/", 1)[1].split("?")[0]
    for root in [STATIC / "static", *(Path(p) for p in __import__("drf_spectacular_sidecar").__path__)]:
        for candidate in (root / relative, root / "static" / relative):
            if candidate.is_file():
                return len(gzip.compress(candidate.read_bytes()))
    return 0


def test_print_the_cost_of_each_page(page, live_server, client):
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    print(f"\n{'page':<16} {'requests':>8} {'KB gzip':>8} {'fragment KB':>11} {'DCL ms':>7}")
    for name, path in demo_pages().items():
        sizes: list[int] = []

        def count(response, sizes=sizes):
            sizes.append(size_of(response))

        page.on("response", count)
        page.goto(live_server.url + path)
        page.wait_for_load_state("networkidle")
        page.remove_listener("response", count)
        timings = []
        for _ in range(6):
            page.reload(wait_until="domcontentloaded")
            timings.append(page.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd"))
        fragment = client.get(path, headers={"X-HUD-Fragment": "live", "Accept-Encoding": "gzip"})
        live = "X-HUD-Fragment" in fragment.get("Vary", "")
        fragment_kb = f"{len(fragment.content) / 1024:.1f}" if live else "—"
        dcl = statistics.median(timings[1:])
        print(f"{name:<16} {len(sizes):>8} {sum(sizes) / 1024:>8.1f} {fragment_kb:>11} {dcl:>7.0f}")


def size_of(response) -> int:
    if "/static/" in response.url:
        return static_gzip_bytes(response.url)
    return response.request.sizes()["responseBodySize"]
