"""Server time of every HUD page with 200,000 job results in PostgreSQL (target: under 300 ms each).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ootci_hud .venv/bin/pytest -s tests/bench/bench_hud.py

Runs in its own test database (suffix ``_hudbench``). Rows are generated inside PostgreSQL
(tests/bench/data.py) plus 20,000 dispatches, a tenth of them never called back, so the lost-dispatch
queries have work to do. Prints the median of five timed requests per page:

- cold: every figure computed in the request (HUD_CACHE_SECONDS=0), after one warm-up request: what a request
  pays for figures nobody asked for in the last HUD_CACHE_SECONDS, and what the scheduled refresh pays per page;
- served: the cache on, after one run of the scheduled refresh (``hud.tasks.figures_refresh``), the steady state:
  the figures the pages show by default come from the cache; a page it does not cover (another window or event)
  computes them in its first request and is served from the cache after that.

The target is asserted on both, with a margin for the shared machine (under 300 / 0.8 = 375 ms); a page over 300 ms is
marked in the output. The overview pages' figures take longest at one hour of the UTC day (each window reads part of
its first day from the job results): they are timed at six hours of the day, and the overview pages' cold times are
asserted as they would be at the slowest of them.

Before/after (issue #30's goal is every page cold under 300 ms at 1,000,000 job results):

    BENCH_BASELINE=/tmp/base BENCH_ROWS=1000000 DATABASE_URL=postgres://postgres@127.0.0.1:5432/ootci_hud \
        .venv/bin/pytest -s -p no:xdist -p no:cacheprovider tests/bench/bench_hud.py -k before_and_after

times each page cold in a checkout of the old tree (``git archive <commit> | tar -x -C /tmp/base``, its .venv
symlinked) and in this one, interleaved over BENCH_ROUNDS rounds, on kept databases (see
``test_cold_pages_before_and_after``), and asserts no page got slower.
"""

import json
import os
import statistics
import subprocess
import time
from datetime import UTC, datetime, timedelta
from datetime import time as dt_time
from pathlib import Path

import psycopg
import pytest
from django.core.cache import cache
from django.db import connection
from django.utils import timezone
from pytest_django.fixtures import _set_suffix_to_test_databases

from hud import tasks
from hud.figures import queries
from hud.stores.types import EVENTS
from ootci.models import JobResult
from tests.bench.data import seed_job_results

ROWS = int(os.environ.get("BENCH_ROWS", 200_000))
TARGET_MS = 300
MARGIN = 0.8  # a shared 2-core machine: pages move by a fifth from run to run
# Every page is held under the target cold (with the margin) since the readiness windows' run times come from a roll-up
# (migration ootci 0045); before, the overview pages were exempt from the cold assertion.
LIMIT_MS = TARGET_MS / MARGIN


@pytest.fixture(scope="session")
def django_db_modify_db_settings():
    _set_suffix_to_test_databases("hudbench")


def add_dispatches(count: int) -> None:
    with connection.cursor() as db:
        db.execute(
            """
            INSERT INTO ootci_delivery (delivery_id, event, action, upstream_repo, head_sha, ref, payload,
                                        received_at, archive_key, pull_request_id, pending)
            SELECT 'bench-' || g, 'pull_request', 'synchronize', 'pytorch/pytorch', md5(g::text), '', '{}'::jsonb,
                   now() - make_interval(secs => random() * 30 * 86400), '', NULL, false
            FROM generate_series(1, %(n)s) AS g""",
            {"n": count},
        )
        db.execute(
            """
            INSERT INTO ootci_dispatch (delivery_id, backend_id, status, attempts, last_error, payload_trimmed,
                                        created_at, sent_at, updated_at)
            SELECT d.id, (SELECT id FROM ootci_backend ORDER BY id OFFSET (d.id %% 10) LIMIT 1),
                   'sent', 1, '', false, d.received_at, d.received_at, now()
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


@pytest.mark.django_db(transaction=True)
def test_every_hud_page_answers_within_the_target(client, settings):
    """The rows committed and vacuumed, as autovacuum leaves a table that grows by inserts (PostgreSQL 13+): inside a
    test's transaction no page is all-visible, and every index-only scan of the HUD's covering indexes would read the
    table's pages too (at 1,000,000 job results the overview pages took 0.83-1.18 s cold that way, 0.34-0.39 s
    vacuumed)."""
    began = time.perf_counter()
    seeded = seed_job_results(ROWS, days=30)
    add_dispatches(20_000)
    with connection.cursor() as db:
        db.execute("VACUUM ANALYZE")
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
    worst = worst_hour_extra()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'cold':>9} {'served':>9}  page (median of 5; cold = computed in the request, served = cache on)")
    for url in pages:
        assert client.get(url).status_code == 200, url
        cold = median_ms(client, url, settings, served=False)
        served = median_ms(client, url, settings, served=True)
        if url in OVERVIEWS:  # as it would be cold at the hour of the UTC day when its figures take longest
            cold += worst[OVERVIEWS[url]]
        note = "  (OVER TARGET)" if max(cold, served) > TARGET_MS else ""
        print(f"{cold:7.1f}ms {served:7.1f}ms  {url}{note}{' (cold at its worst hour)' if url in OVERVIEWS else ''}")
        if max(cold, served) > LIMIT_MS:
            slow.append(f"{url} ({cold:.0f} / {served:.0f} ms)")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    assert not slow, f"over {TARGET_MS} ms / {MARGIN} (cold / served): {slow}"


def median_ms(client, url: str, settings, *, served: bool) -> float:
    settings.HUD_CACHE_SECONDS = 180 if served else 0
    cache.clear()
    if served:
        tasks.figures_refresh()  # as the every-minute schedule does
    else:
        client.get(url)  # warm-up
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        client.get(url)
        timings.append((time.perf_counter() - start) * 1000)
    return statistics.median(timings)


# The overview pages and the window of their summary. Their figures' time depends on the hour of the UTC day: each
# window reads the part of its first day that is not whole from the job results (hud.stores.db.rollup).
OVERVIEWS = {"/oot/": 7, "/oot/?days=30": 30, "/api/oot/": 7}
HOURS = (0.25, 6, 11.9, 12.1, 18, 23.75)


def worst_hour_extra() -> dict[int, float]:
    """Per summary window: how much longer the overview's figures computed in a request (readiness and summary) take
    at the slowest of HOURS of the UTC day than now (median of 3 each; the data ends now, so a ``now`` earlier in the
    day also counts the rows after it, as the window would). Printed per hour; added to the pages' cold times."""
    real = timezone.now()
    midnight = datetime.combine(real.astimezone(UTC).date(), dt_time.min, tzinfo=UTC)
    at = [midnight + timedelta(hours=h) for h in HOURS]
    moments = [real] + [moment - timedelta(days=1) if moment > real else moment for moment in at]
    found = {}
    for days in sorted(set(OVERVIEWS.values())):
        spent = []
        for now in moments:

            def figures(now=now, days=days):
                queries.readiness_figures(now=now)
                queries.summary_compute(days, EVENTS[0], None, now)

            figures()
            spent.append(statistics.median(timed(figures) for _ in range(3)))
        hours = ", ".join(f"{now:%H:%M} {ms:.0f}" for now, ms in zip(moments[1:], spent[1:], strict=True))
        print(f"overview figures, {days} days, ms at UTC hours: now ({real:%H:%M}) {spent[0]:.0f}; {hours}")
        found[days] = max(0.0, max(spent[1:]) - spent[0])
    return found


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


# --- before/after: BENCH_BASELINE=<checkout> -----------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
SERVER = "postgresql://postgres@127.0.0.1:5432"
BASELINE = os.environ.get("BENCH_BASELINE", "")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", 3))
KEPT = os.environ.get("BENCH_DB", "ootci_hudbench")  # the kept databases' name prefix


@pytest.mark.skipif(not BASELINE, reason="BENCH_BASELINE not set")
def test_cold_pages_before_and_after():
    """Cold server time of every page in the baseline checkout and in this one, interleaved round by round, on the
    same BENCH_ROWS job results. The databases are kept between runs (seeding 1,000,000 takes minutes):
    ``<BENCH_DB>_<rows>`` (BENCH_DB defaults to ``ootci_hudbench``) migrated and seeded by this tree, ``…_before`` a
    copy of it taken back to the baseline's newest migration. Drop them to seed afresh. Asserts that no page got
    slower by more than MARGIN."""
    after = f"{KEPT}_{ROWS}"
    before = f"{after}_before"
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        made = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
        if after not in made:
            conn.execute(f"CREATE DATABASE {after}")
            _manage(ROOT, after, "migrate", "--no-input", "-v", "0")
            _manage(ROOT, after, "shell", "-c", _script(), env={"BENCH_SEED": str(ROWS)})
        if before not in made:
            conn.execute(f"CREATE DATABASE {before} TEMPLATE {after}")
            _manage(ROOT, before, "migrate", "ootci", _newest_migration(Path(BASELINE)), "-v", "0")
    with psycopg.connect(f"{SERVER}/{after}") as conn:
        pr, job = conn.execute(
            "SELECT j.pr_number, j.id FROM ootci_jobresult j JOIN ootci_backend b ON b.id = j.backend_id "
            "WHERE b.repo = 'bench/npu' AND j.pr_number IS NOT NULL ORDER BY j.created_at DESC LIMIT 1"
        ).fetchone()
    pages = [
        "/oot/",
        "/oot/?days=30",
        "/api/oot/",
        "/oot/bench/npu/",
        "/oot/bench/npu/?days=30&failing=1",
        "/oot/bench/npu/?event=nightly&days=30",
        f"/oot/pr/{pr}/",
        f"/oot/bench/npu/jobs/{job}/",
        "/oot/metrics/",
        "/oot/metrics/?days=90",
        "/api/oot/bench/npu/",
    ]
    found: dict[str, list[dict]] = {"before": [], "after": []}
    for n in range(ROUNDS):
        for label, tree, database in (("before", Path(BASELINE), before), ("after", ROOT, after)):
            out = _manage(tree, database, "shell", "-c", _script(), env={"BENCH_URLS": json.dumps(pages)})
            found[label].append(json.loads(out.split("BENCH ", 1)[1]))
            print(f"\n[round {n + 1}, {label}] load {os.getloadavg()[0]:.1f}", end="")
    print(f"\n{ROWS:,} job results; cold, median over {ROUNDS} rounds of the median of 5 requests")
    print(f"{'before':>9} {'after':>9}  page")
    slower = []
    for url in pages:
        was, now = (statistics.median(r[url] for r in found[label]) for label in ("before", "after"))
        print(f"{was:7.1f}ms {now:7.1f}ms  {url}")
        if now > was / MARGIN and now > 50:
            slower.append(url)
    assert not slower, f"slower than before: {slower}"


def _script() -> str:
    return f"exec(open({str(ROOT / 'tests/bench/hud_timer.py')!r}).read())"


def _newest_migration(tree: Path) -> str:
    return max(p.stem for p in (tree / "ootci/migrations").glob("0*.py"))


def _manage(tree: Path, database: str, *args: str, env: dict | None = None) -> str:
    environment = (
        os.environ
        | (env or {})
        | {
            "DATABASE_URL": f"{SERVER}/{database}",
            "DJANGO_DEBUG": "true",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "BENCH_RUNS": "5",
        }
    )
    done = subprocess.run(
        [str(tree / ".venv/bin/python"), "manage.py", *args], cwd=tree, env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
