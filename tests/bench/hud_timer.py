"""Run inside a checkout by ``manage.py shell`` (tests/bench/bench_hud.py's before/after run): seeds the database it is
given (BENCH_SEED=rows) or prints, as one JSON line, the median cold server time of each page of BENCH_URLS (figures
computed in the request, HUD_CACHE_SECONDS=0, BENCH_RUNS requests after a warm-up, Django test client). Only Django's
own API is used, so it runs in an older checkout too."""

import json
import os
import statistics
import time

from django.conf import settings
from django.db import connection
from django.test import Client


def seed(rows: int) -> None:
    from tests.bench.bench_hud import add_dispatches
    from tests.bench.data import seed_job_results

    seed_job_results(rows, days=30)
    add_dispatches(20_000)
    with connection.cursor() as db:
        db.execute("VACUUM ANALYZE")


def timed(urls: list[str], runs: int) -> dict[str, float]:
    settings.HUD_CACHE_SECONDS = 0
    settings.ALLOWED_HOSTS = ["*"]
    client = Client()
    found = {}
    for url in urls:
        assert client.get(url).status_code == 200, url
        timings = []
        for _ in range(runs):
            start = time.perf_counter()
            client.get(url)
            timings.append((time.perf_counter() - start) * 1000)
        found[url] = statistics.median(timings)
    return found


if os.environ.get("BENCH_SEED"):
    seed(int(os.environ["BENCH_SEED"]))
else:
    print("BENCH " + json.dumps(timed(json.loads(os.environ["BENCH_URLS"]), int(os.environ["BENCH_RUNS"]))))
