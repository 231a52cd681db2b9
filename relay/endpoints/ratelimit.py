"""Rate limits: a sliding window per key, counted in Redis (REDIS_URL) or else in the database cache.

The window is the usual two-bucket approximation: requests in the current fixed minute plus the previous
minute's count weighted by how much of it still overlaps the last 60 seconds. One Redis round trip per
hit (INCR, EXPIRE, GET pipelined). Refused requests count too, so a client hammering through its 429s
stays limited.

If the shared store fails, the limit is not dropped: it is enforced per process from memory (each
gunicorn worker counts on its own, so a repo can get up to workers × limit through) and every such
decision is logged as an error and counted in ``store_failures()``.
"""

import logging
import math
import threading
import time
from dataclasses import dataclass

import redis
from django.conf import settings
from django.core.cache import caches
from django.db import DatabaseError

from ootci.broker import redis_failed, redis_resting

logger = logging.getLogger(__name__)

PREFIX = "ootci:ratelimit"
REDIS_TIMEOUT_SECONDS = 0.5

_redis_clients: dict[str, redis.Redis] = {}
_local_counts: dict[tuple[str, int], int] = {}
_lock = threading.Lock()
_failures = 0


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    count: float  # requests in the last window, this one included (the weighted estimate)
    limit: int
    retry_after: int  # whole seconds until a request would be allowed again; 0 when allowed
    degraded: bool = False  # decided from process memory because the shared store failed


def rate_limit_hit(*, key: str, limit: int, window: int = 60, now: float | None = None) -> RateDecision:
    """Count one request for ``key`` and say whether it is within ``limit`` per ``window`` seconds."""
    now = time.time() if now is None else now
    index = int(now // window)
    elapsed = now - index * window
    degraded = False
    try:
        if settings.REDIS_URL:
            current, previous = _redis_count(key, index, window)
        else:
            current, previous = _cache_count(key, index, window)
    except (redis.RedisError, DatabaseError, OSError) as e:
        degraded = True
        _failure_count()
        logger.error("rate limit store failed (%s); limiting %s per process until it is back", e, key)
        current, previous = _local_count(key, index)
    estimate = current + previous * (window - elapsed) / window
    if estimate <= limit:
        return RateDecision(True, estimate, limit, 0, degraded)
    wait = _seconds_until_allowed(current, previous, limit, window, elapsed)
    return RateDecision(False, estimate, limit, wait, degraded)


def store_failures() -> int:
    """How many decisions this process made without the shared store since it started."""
    return _failures


def _redis_count(key: str, index: int, window: int) -> tuple[int, int]:
    url = settings.REDIS_URL
    if redis_resting(url):  # it failed a moment ago: do not make this request wait for its timeout again
        raise redis.ConnectionError("Redis failed a moment ago; not tried")
    current_key, previous_key = f"{PREFIX}:{key}:{index}", f"{PREFIX}:{key}:{index - 1}"
    pipe = _redis_client(url).pipeline(transaction=False)
    pipe.incr(current_key)
    pipe.expire(current_key, 2 * window)
    pipe.get(previous_key)
    try:
        current, _, previous = pipe.execute()
    except redis.RedisError:
        redis_failed(url)
        raise
    return int(current), int(previous or 0)


def _cache_count(key: str, index: int, window: int) -> tuple[int, int]:
    # The database cache has no atomic increment: concurrent hits may undercount a little. It is the
    # single-machine mode; deployments with several web processes set REDIS_URL.
    cache = caches["default"]
    current_key, previous_key = f"{PREFIX}:{key}:{index}", f"{PREFIX}:{key}:{index - 1}"
    cache.add(current_key, 0, timeout=2 * window)
    try:
        current = cache.incr(current_key)
    except ValueError:  # expired between add and incr
        cache.set(current_key, 1, timeout=2 * window)
        current = 1
    return int(current), int(cache.get(previous_key) or 0)


def _local_count(key: str, index: int) -> tuple[int, int]:
    with _lock:
        if len(_local_counts) > 10_000:
            for stale in [k for k in _local_counts if k[1] < index - 1]:
                del _local_counts[stale]
        current = _local_counts.get((key, index), 0) + 1
        _local_counts[(key, index)] = current
        return current, _local_counts.get((key, index - 1), 0)


def _failure_count() -> None:
    global _failures
    with _lock:
        _failures += 1


def _redis_client(url: str) -> redis.Redis:
    client = _redis_clients.get(url)
    if client is None:
        client = redis.Redis.from_url(
            url, socket_timeout=REDIS_TIMEOUT_SECONDS, socket_connect_timeout=REDIS_TIMEOUT_SECONDS
        )
        _redis_clients[url] = client
    return client


def _seconds_until_allowed(current: int, previous: int, limit: int, window: int, elapsed: float) -> int:
    """When the estimate falls to ``limit`` if nothing else arrives: the previous minute's weight decays first."""
    left = window - elapsed
    if current <= limit and previous:
        wait = left - window * (limit - current) / previous
    else:
        # Only the next minute helps: this minute's count becomes the decaying previous one.
        wait = left + window * (1 - limit / current)
    return max(1, math.ceil(wait))
