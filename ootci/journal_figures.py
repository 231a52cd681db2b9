"""What the relay's journal holds, as its replay schedule last counted it (``relay.reliability.journal``): requests
waiting for the database, and dead letters (entries refused for good: forged, corrupt, too old). Kept in the cache,
read by the relay strip of the HUD."""

from django.core.cache import cache

KEY = "ootci:journal:figures"


def journal_figures() -> tuple[int, int]:
    """(waiting, dead letters); (0, 0) before the first count or when the cache does not answer."""
    try:
        found = cache.get(KEY) or {}
    except Exception:  # the cache is the database and it is down: the strip says nothing rather than fail
        return 0, 0
    return int(found.get("waiting", 0)), int(found.get("dead", 0))
