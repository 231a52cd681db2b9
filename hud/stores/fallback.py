"""When ClickHouse fails, the database answers: the stores that fall back read by read, which store answers now, and
why this request's figures came from the database (``base.html`` says so).

After a failed ClickHouse read, this process reads the database for ``RETRY_CLICKHOUSE_SECONDS`` before trying
ClickHouse again, so that an outage costs one failed attempt (perhaps a connect timeout) per interval, not one per
figure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from time import monotonic
from typing import TYPE_CHECKING

from hud.stores.clickhouse import connection as clickhouse

if TYPE_CHECKING:
    from hud.stores.base import Ask, BackendWindow, Store, Windows

logger = logging.getLogger(__name__)

RETRY_CLICKHOUSE_SECONDS = 30.0
_outage = {"until": 0.0, "reason": ""}
_fallback: ContextVar[str] = ContextVar("hud_fallback", default="")


def source() -> str:
    """Which store answers now: "clickhouse" (configured, not failing) or "database"."""
    if not clickhouse.is_configured():
        return "database"
    if monotonic() < _outage["until"]:
        _fallback.set(_outage["reason"])
        return "database"
    return "clickhouse"


def fallback_reason() -> str:
    """Why this request's figures came from the database instead of ClickHouse ("" when they did not)."""
    return _fallback.get()


@contextmanager
def unit_of_work(*, linger: bool = False) -> Iterator[None]:
    """One page or API request: one ClickHouse client at most (opened on the first read) and its own fallback note.
    With ``linger`` (a request, not a task) an embedded engine stays open for the next request a moment longer."""
    token = _fallback.set("")
    try:
        with clickhouse.session(linger=linger):
            yield
    finally:
        _fallback.reset(token)


def clickhouse_failed(reason: str) -> None:
    """A ClickHouse read failed: the database answers every read for RETRY_CLICKHOUSE_SECONDS, and this request's
    page says why (``fallback_reason``)."""
    _outage.update(until=monotonic() + RETRY_CLICKHOUSE_SECONDS, reason=reason)
    _fallback.set(reason)


class FallbackStore:
    """The ClickHouse store; any read it fails is answered by the database store, and ``failed`` is told why (the
    caller then reads the database for a while and tells the page)."""

    def __init__(self, primary: Store, fallback: Store, *, failed: Callable[[str], None]) -> None:
        self.primary, self.fallback, self.failed = primary, fallback, failed

    def _read(self, method: str, *args, **kwargs):
        try:
            return getattr(self.primary, method)(*args, **kwargs)
        except clickhouse.ClickHouseError as ex:
            reason = " ".join(str(ex).split())[:300]
            logger.warning("HUD read %s from the database: %s", method, reason)
            self.failed(reason)
            return getattr(self.fallback, method)(*args, **kwargs)

    def figure_rows(self, *, windows: Windows, asks: list[Ask], backend_id: int | None = None) -> list[dict]:
        return self._read("figure_rows", windows=windows, asks=asks, backend_id=backend_id)

    def sha_keys(self, window: BackendWindow, *, failing_only: bool, limit: int) -> list[dict]:
        return self._read("sha_keys", window, failing_only=failing_only, limit=limit)

    def sha_keys_of(self, window: BackendWindow, *, shas: list[str]) -> list[dict]:
        return self._read("sha_keys_of", window, shas=shas)

    def cells(self, window: BackendWindow, *, shas: list[str]) -> list[dict]:
        return self._read("cells", window, shas=shas)


class FallbackHistory(FallbackStore):
    """The ClickHouse rows, or the database's when a ClickHouse read fails (as :class:`FallbackStore`)."""

    def search_rows(self, **kwargs) -> list[dict]:
        return self._read("search_rows", **kwargs)

    def history_rows(self, **kwargs) -> list[dict]:
        return self._read("history_rows", **kwargs)

    def failure_messages(self, **kwargs) -> dict[int, str]:
        return self._read("failure_messages", **kwargs)
