"""Fault benchmarks: figures for the README's reliability section.

Run: .venv/bin/pytest -p no:xdist -s tests/bench/bench_faults.py   (prints figures)

1. Webhook answer time while Redis hangs: a redis-server of the benchmark's own, SIGSTOPped, is the cache, the rate
   limiter's store and the task broker (tasks queued, as in production); 200 signed pull_request deliveries to two
   backends through the Django stack. Goal: p99 < 1 s (GitHub gives up after 10 s).
2. Dispatches lost over a GitHub outage of 1 h, on a short clock: 20 deliveries to 5 backends while GitHub answers
   502 to everything, the stale-dispatch schedule run once a simulated minute for the hour, then GitHub back for
   30 simulated minutes. Goal: 0 lost, 0 sent twice, 0 failed.
"""

import statistics
import time
from collections import Counter
from datetime import timedelta

import pytest
from django.db.models import F
from django_q.conf import Conf

from ootci.models import Dispatch
from relay import tasks
from tests.fakes.github import Reply
from tests.servers import RedisServer

pytestmark = pytest.mark.django_db(transaction=True)


def test_webhook_answer_time_while_redis_hangs(
    settings, monkeypatch, tmp_path, make_backend, fake_github, post_webhook
):
    server = RedisServer(tmp_path).start()
    settings.REDIS_URL = server.url
    settings.CACHES = {**settings.CACHES, "default": {**settings.CACHES["default"], "LOCATION": server.url}}
    monkeypatch.setattr(Conf, "REDIS", server.url)
    monkeypatch.setattr(Conf, "SYNC", False)
    make_backend("org/a")
    make_backend("org/b")
    try:
        server.pause()
        times, statuses = [], Counter()
        for n in range(200):
            started = time.perf_counter()
            response = post_webhook("pull_request", "pull_request.opened.payload", delivery_id=f"hang-{n}")
            times.append(time.perf_counter() - started)
            statuses[response.status_code] += 1
    finally:
        server.stop()
    p50, p99 = statistics.quantiles(times, n=100)[49], statistics.quantiles(times, n=100)[98]
    print(
        f"\nwebhooks while Redis hangs: {len(times)} answered {dict(statuses)}; "
        f"p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {max(times) * 1000:.0f} ms"
    )
    assert statuses == {202: 200}


def test_dispatches_lost_over_a_one_hour_github_outage(make_backend, fake_github, post_webhook):
    for i in range(5):
        make_backend(f"org{i}/backend")
    fake_github.outage = Reply(502, {"message": "Server Error"})
    for n in range(20):
        post_webhook("pull_request", "pull_request.opened.payload", delivery_id=f"outage-{n}")
    minute = timedelta(minutes=1)
    for elapsed in range(90):
        if elapsed == 60:
            fake_github.outage = None  # GitHub is back after an hour
        Dispatch.objects.update(
            created_at=F("created_at") - minute, updated_at=F("updated_at") - minute, retry_at=F("retry_at") - minute
        )
        tasks.dispatches_resend_stale()
    sent = Counter((r.path, r.json["client_payload"]["delivery_id"]) for r in fake_github.dispatches())
    states = Counter(Dispatch.objects.values_list("status", flat=True))
    tries = len(fake_github.requests)  # every call to GitHub: installation lookups and tokens fail first
    lost = 100 - len(sent)
    print(
        f"\n1 h GitHub outage (short clock): 100 dispatches; {states['sent']} sent, {states['failed']} failed, "
        f"{states['pending']} pending; lost {lost}, sent twice {sum(1 for c in sent.values() if c > 1)}; "
        f"{tries} requests to GitHub in all"
    )
    assert lost == 0 and set(sent.values()) == {1}
