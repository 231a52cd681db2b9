"""The per-repo callback rate limit, on the real Redis, on the database cache, and with its store down."""

import logging
import time
import uuid

import pytest
from django.core.management import call_command

from ootci.models import CallbackRejection, JobResult
from relay.endpoints import ratelimit
from tests.fakes.oidc import reporter_body

DATABASE_CACHE = {"default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "ootci_cache"}}


@pytest.fixture
def key() -> str:
    return f"test:{uuid.uuid4().hex}"


@pytest.fixture
def minute() -> float:
    """The start of the current minute: decisions are made at chosen instants inside real Redis windows."""
    return (time.time() // 60) * 60


def test_it_allows_up_to_the_limit_and_then_refuses(key, minute):
    decisions = [ratelimit.rate_limit_hit(key=key, limit=3, now=minute + 10) for _ in range(4)]

    assert [d.allowed for d in decisions] == [True, True, True, False]
    # This minute holds 4 hits: allowed again once the next minute has decayed them to 3.
    assert decisions[-1].retry_after == 50 + 15
    assert not any(d.degraded for d in decisions)


def test_the_previous_minute_counts_by_how_much_it_still_overlaps(key, minute):
    for _ in range(3):
        ratelimit.rate_limit_hit(key=key, limit=3, now=minute - 30)

    first = ratelimit.rate_limit_hit(key=key, limit=3, now=minute + 30)  # 1 + 3 × ½
    second = ratelimit.rate_limit_hit(key=key, limit=3, now=minute + 30)  # 2 + 3 × ½

    assert (first.allowed, first.count) == (True, 2.5)
    assert (second.allowed, second.count) == (False, 3.5)
    assert second.retry_after == 10  # the old minute's weight must fall to 1/3: 20 s before it ends


def test_keys_are_counted_apart(key, minute):
    for _ in range(2):
        ratelimit.rate_limit_hit(key=key, limit=1, now=minute + 1)

    assert ratelimit.rate_limit_hit(key=key + "-other", limit=1, now=minute + 1).allowed


def test_without_redis_it_counts_in_the_database_cache(db, settings, key, minute):
    settings.REDIS_URL = ""
    settings.CACHES = DATABASE_CACHE
    call_command("createcachetable")

    decisions = [ratelimit.rate_limit_hit(key=key, limit=2, now=minute + 5) for _ in range(3)]

    assert [d.allowed for d in decisions] == [True, True, False]
    assert not any(d.degraded for d in decisions)


def test_it_does_not_fail_open_when_its_store_is_down(settings, key, minute, caplog):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    failures = ratelimit.store_failures()

    with caplog.at_level(logging.ERROR, logger="relay.endpoints.ratelimit"):
        decisions = [ratelimit.rate_limit_hit(key=key, limit=2, now=minute + 5) for _ in range(3)]

    assert [d.allowed for d in decisions] == [True, True, False]
    assert all(d.degraded for d in decisions)
    assert ratelimit.store_failures() == failures + 3
    assert "rate limit store failed" in caplog.text


def test_the_database_fallback_does_not_fail_open_either(db, settings, key, minute):
    settings.REDIS_URL = ""
    settings.CACHES = {"default": {**DATABASE_CACHE["default"], "LOCATION": "no_such_table"}}

    decisions = [ratelimit.rate_limit_hit(key=key, limit=1, now=minute + 5) for _ in range(2)]

    assert [(d.allowed, d.degraded) for d in decisions] == [(True, True), (False, True)]


def test_a_repo_over_its_limit_gets_429_with_retry_after(downstream, settings):
    settings.CALLBACK_RATE_LIMIT_PER_MIN = 2
    ci, other = downstream(), downstream()
    body = reporter_body("nightly.completed")

    answers = [ci.post(body) for _ in range(3)]

    assert [a.status_code for a in answers] == [200, 200, 429]
    refused = answers[-1]
    assert refused.json()["detail"].startswith(f"Rate limit exceeded for {ci.repo}: 2 callbacks per minute")
    assert int(refused.headers["Retry-After"]) >= 1
    assert CallbackRejection.objects.get().status_code == 429
    assert other.post(body).status_code == 200  # per repo
    assert JobResult.objects.count() == 2


def test_refused_and_malformed_callbacks_count_too(downstream, settings):
    settings.CALLBACK_RATE_LIMIT_PER_MIN = 2
    ci = downstream()

    statuses = [ci.post(b"{").status_code for _ in range(2)] + [ci.post(reporter_body("nightly.completed")).status_code]

    assert statuses == [400, 400, 429]
