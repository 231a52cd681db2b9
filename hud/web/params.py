"""Query-string and path parameters of the HUD pages and API: anything unexpected falls back to the default.

Numbers are ASCII digits only: ``str.isdigit`` also accepts "²" or "٣", which ``int`` refuses or reads.
"""

from datetime import date

from django.http import HttpRequest

from hud.stores.types import EVENTS

DAYS = (1, 7, 30)
METRIC_DAYS = (7, 14, 30, 90)
MAX_PAGE = 10_000


def number(value: str) -> int | None:
    """``value`` as a non-negative integer when it is ASCII digits (at most 19 of them: ``int`` refuses thousands),
    else None."""
    value = value.strip()
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 19 else None


def days(request: HttpRequest, choices: tuple[int, ...] = DAYS, default: int = 7) -> int:
    value = number(request.GET.get("days", ""))
    return value if value in choices else default


def event(request: HttpRequest) -> str:
    value = request.GET.get("event", "")
    return value if value in EVENTS else EVENTS[0]


def page(request: HttpRequest) -> int:
    value = number(request.GET.get("page", ""))
    return value if value is not None and 1 <= value <= MAX_PAGE else 1


def after(request: HttpRequest) -> int | None:
    """?after=, a page cursor (a case id): 0 when absent, None when it is not a number (the caller answers 400)."""
    value = request.GET.get("after", "")
    return 0 if value == "" else number(value)


def flag(request: HttpRequest, name: str) -> bool:
    return request.GET.get(name, "").lower() in ("1", "true", "on", "yes")


def text(request: HttpRequest, name: str, limit: int = 200) -> str:
    """A free-text filter (``?runner=``, ``?device=``), stripped and cut to ``limit`` characters."""
    return request.GET.get(name, "").strip()[:limit]


def day(request: HttpRequest) -> date | None | str:
    """?day=YYYY-MM-DD, None when absent, or the text of a bad value (the caller answers 400)."""
    raw = request.GET.get("day", "").strip()[:20]
    if not raw:
        return None
    try:
        return date.fromisoformat(raw) if len(raw) == 10 else raw
    except ValueError:
        return raw
