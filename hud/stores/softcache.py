"""The HUD's cache, failing soft: a figure the cache cannot give or keep is computed instead, never an error page.

The cache is an optimisation of the pages, not a source of their truth. When Redis (or the database cache) is
down or hangs, reads miss and writes are dropped after the client's short timeout (settings.REDIS_TIMEOUT_SECONDS),
and each failure is logged.
"""

import logging
from collections.abc import Callable
from contextvars import ContextVar
from datetime import datetime
from time import time as wall_time
from typing import Any

from django.conf import settings
from django.core.cache import cache

from hud.stores.fallback import source

logger = logging.getLogger(__name__)
# Set while the figures are recomputed ahead of requests (``figures_refresh``): cache reads are skipped.
refreshing: ContextVar[bool] = ContextVar("hud_refreshing", default=False)


def get(key: str) -> Any:
    """The cached value, or None when it is not cached or the cache failed."""
    try:
        return cache.get(key)
    except Exception as e:  # redis.RedisError, OSError, DatabaseError: whatever backend the settings chose
        logger.warning("HUD cache read failed (%s: %s); computing %s", type(e).__name__, e, key)
        return None


def set(key: str, value: Any, timeout: int) -> None:
    try:
        cache.set(key, value, timeout)
    except Exception as e:
        logger.warning("HUD cache write failed (%s: %s); %s not kept", type(e).__name__, e, key)


def through_cache(name: str, key: tuple, compute: Callable[[], Any]) -> Any:
    """``compute()`` as cached under ``name`` and ``key`` (by the store answering) less than HUD_CACHE_SECONDS ago,
    else computed and cached."""
    answering = source()  # each store's figures under their own keys
    entry = None if refreshing.get() else get(figure_key(answering, name, key))
    if entry is not None and wall_time() - entry[0] < settings.HUD_CACHE_SECONDS:
        return entry[1]
    value = compute()
    if source() == answering:  # never cache a fallback answer as ClickHouse's
        set(figure_key(answering, name, key), (wall_time(), value), settings.HUD_CACHE_SECONDS)
    return value


def figure_key(answering: str, name: str, key: tuple) -> str:
    parts = (part.isoformat() if isinstance(part, datetime) else str(part) for part in key)
    return ":".join(["hud", answering, name, *parts])  # no spaces: memcached-safe
