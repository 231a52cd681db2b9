"""Server time of every HUD page with 200,000 job results in PostgreSQL (target: under 300 ms each).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ootci_hud .venv/bin/pytest -s tests/bench/bench_hud.py

Runs in its own test database (suffix ``_hudbench``). Rows are generated inside PostgreSQL
(tests/bench/data.py) plus 20,000 dispatches, a tenth of them never called back, so the lost-dispatch
queries have work to do. Prints the median of five timed requests per page after one warm-up:

- cold: every figure computed in the request (HUD_CACHE_SECONDS=0): what the first request pays, and what each
  background refresh costs;
- served: the figure cache on and every cached figure stale, the steady state of the stale-while-revalidate cache
  (``queries.cached``): the page is served from the cache and one refresh task is enqueued per figure.

The target is asserted on cold, except for the pages in OVER_TARGET_COLD, which still miss it computed fresh and
are marked in the output; served is asserted for every page.
"""

import os
import statistics
import time

import pytest
from django.core.cache import cache
from django.db import connection
from pytest_django.fixtures import _set_suffix_to_test_databases

from ootci.models import JobResult
from tests.bench.data import seed_job_results

ROWS = int(os.environ.get("BENCH_ROWS", 200_000))
TARGET_MS = 300
# Pages whose figures still take longer than the target to compute on a shared 2-CPU machine: most of it is the
# sort that picks the latest attempts of 65,000 (the 14-day sparklines) to 140,000 (30 days and more) job results.
# They are served from the cache, refreshed in the background (served is asserted for them too).
OVER_TARGET_COLD = {"/oot/", "/oot/?days=30", "/oot/metrics/", "/oot/metrics/?days=90", "/api/oot/"}


@pytest.fixture(scope="session")
def django_db_modify_db_settings():
    _set_suffix_to_test_databases("hudbench")


def add_dispatches(count: int) -> None:
    with connection.cursor() as db:
        db.execute(
            """
            INSERT INTO ootci_delivery (delivery_id, event, action, upstream_repo, head_sha, ref, payload,
                                        received_at, archive_key, pull_request_id)
            SELECT 'bench-' || g, 'pull_request', 'synchronize', 'pytorch/pytorch', md5(g::text), '', '{}'::jsonb,
                   now() - make_interval(secs => random() * 30 * 86400), '', NULL
            FROM generate_series(1, %(n)s) AS g""",
            {"n": count},
        )
        db.execute(
            """
            INSERT INTO ootci_dispatch (delivery_id, backend_id, status, attempts, last_error, payload_trimmed,
                                        check_run_wanted, created_at, sent_at, updated_at)
            SELECT d.id, (SELECT id FROM ootci_backend ORDER BY id OFFSET (d.id %% 10) LIMIT 1),
                   'sent', 1, '', false, false, d.received_at, d.received_at, now()
            FROM ootci_delivery d WHERE d.delivery_id LIKE 'bench-%%'""",
            {},
        )
        # Nine in ten dispatches get their job results attached; the rest are lost.
        db.execute(
            """
            UPDATE ootci_jobresult j SET dispatch_id = dp.id
            FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM ootci_dispatch WHERE id %% 10 <> 0) AS dp
            WHERE j.id = dp.n""",
            {},
        )
        db.execute("ANALYZE")


@pytest.mark.django_db
def test_every_hud_page_answers_within_the_target(client, settings):
    began = time.perf_counter()
    seeded = seed_job_results(ROWS, days=30)
    add_dispatches(20_000)
    print(f"\nseeded {seeded.job_results:,} job results over 30 days in {time.perf_counter() - began:.1f} s")
    job = JobResult.objects.filter(backend__repo="bench/npu", pr_number__isnull=False).order_by("-created_at").first()
    pages = [
        "/oot/",
        "/oot/?days=30",
        "/oot/bench/npu/",
        "/oot/bench/npu/?days=30&failing=1",
        "/oot/bench/npu/?event=nightly&days=30",
        f"/oot/pr/{job.pr_number}/",
        f"/oot/bench/npu/jobs/{job.id}/",
        "/oot/metrics/",
        "/oot/metrics/?days=90",
        "/api/oot/",
        "/api/oot/bench/npu/",
    ]
    slow = []
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'cold':>9} {'served':>9}  page (median of 5; cold = computed in the request, served = stale cache)")
    for url in pages:
        assert client.get(url).status_code == 200, url
        cold = median_ms(client, url, settings, stale=False)
        served = median_ms(client, url, settings, stale=True)
        note = ""
        if cold > TARGET_MS:
            note = "  (cold over target: known, served from cache)" if url in OVER_TARGET_COLD else "  (OVER TARGET)"
        print(f"{cold:7.1f}ms {served:7.1f}ms  {url}{note}")
        if (cold > TARGET_MS and url not in OVER_TARGET_COLD) or served > TARGET_MS:
            slow.append(f"{url} ({cold:.0f} / {served:.0f} ms)")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    assert not slow, f"over {TARGET_MS} ms (cold / served): {slow}"


def median_ms(client, url: str, settings, *, stale: bool) -> float:
    settings.HUD_CACHE_SECONDS = 1 if stale else 0
    cache.clear()
    client.get(url)  # warm-up (fills the cache when it is on)
    if stale:
        time.sleep(1.1)  # every cached figure is now stale: served as is, one refresh enqueued (on commit) each
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        client.get(url)
        timings.append((time.perf_counter() - start) * 1000)
    return statistics.median(timings)
