"""Query-string parameters of the HUD pages and API: anything unexpected falls back to the default."""

from django.http import HttpRequest

from hud.queries import EVENTS

DAYS = (1, 7, 30)
METRIC_DAYS = (7, 14, 30, 90)
MAX_PAGE = 10_000


def days(request: HttpRequest, choices: tuple[int, ...] = DAYS, default: int = 7) -> int:
    value = request.GET.get("days", "")
    return int(value) if value.isdigit() and int(value) in choices else default


def event(request: HttpRequest) -> str:
    value = request.GET.get("event", "")
    return value if value in EVENTS else EVENTS[0]


def page(request: HttpRequest) -> int:
    value = request.GET.get("page", "")
    return int(value) if value.isdigit() and 1 <= int(value) <= MAX_PAGE else 1


def flag(request: HttpRequest, name: str) -> bool:
    return request.GET.get(name, "").lower() in ("1", "true", "on", "yes")
