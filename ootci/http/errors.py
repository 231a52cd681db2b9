"""Error answers that Django would otherwise give as its own HTML: JSON with a ``detail`` under the API and relay
paths, a short page elsewhere.

- PostgreSQL unreachable: 503 with Retry-After, not a bare 500. Nothing here reaches the database, so it answers
  while the database is down.
- A URL that matches no route (handler404): under /api/ and /github/ a JSON 404, as the API's own 404s are.
"""

import logging

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 30
JSON_PATHS = ("/api/", "/github/")


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        # OperationalError: cannot connect, connection lost, server shutting down; InterfaceError: the connection
        # was closed under us. Both pass when the database is back; anything else is a real error.
        if not isinstance(exception, OperationalError | InterfaceError):
            return None
        logger.error("database unavailable for %s %s: %s", request.method, request.path, exception)
        if request.path.startswith(JSON_PATHS):
            detail = f"The database is unavailable; retry in {RETRY_AFTER_SECONDS} seconds."
            response = JsonResponse({"detail": detail}, status=503)
        else:
            html = render_to_string("503.html", {"retry_after": RETRY_AFTER_SECONDS})
            response = HttpResponse(html, status=503)
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """The JSON 404 of a URL under /api/ or /github/ that matches no route (hud.web.views.not_found routes here)."""
    return JsonResponse({"detail": f"Not found: {request.path}"}, status=404)
