"""Per-request setup of the HUD's stores."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from hud.stores import fallback


def unit_of_work(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    """Each request is one unit of work for ClickHouse (one client at most, opened by the first read and closed
    after the response is rendered, or for chdb kept a moment for the next request: ``clickhouse.CHDB_LINGER``) and
    starts with no fallback note (see ``fallback.fallback_reason``)."""

    def middleware(request: HttpRequest) -> HttpResponse:
        with fallback.unit_of_work(linger=True):
            return get_response(request)

    return middleware
