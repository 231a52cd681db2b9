"""The HUD's cache, failing soft: a figure the cache cannot give or keep is computed instead, never an error page.

The cache is an optimisation of the pages, not a source of their truth. When Redis (or the database cache) is
down or hangs, reads miss and writes are dropped after the client's short timeout (settings.REDIS_TIMEOUT_SECONDS),
and each failure is logged.
"""

import logging
from typing import Any

from django.core.cache import cache

logger = logging.getLogger(__name__)


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
