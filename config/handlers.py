"""The WSGI handler of the relay's write endpoints: only the middleware they need.

Webhooks, callbacks, uploads and the CRCR ingest answer a few lines of JSON to machines. The HUD's middleware
(sessions, CSRF, authentication, messages, CSP, GZip, conditional GET, clickjacking headers, the ClickHouse unit of
work) did nothing for them but cost every callback its CPU: ``WRITE_ENDPOINT_MIDDLEWARE`` keeps the HTTPS redirect,
HSTS and the other security headers, and the database-unavailable answer.
"""

from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler

WRITE_PATHS = ("/github/", "/api/crcr/")


def write_endpoint(path: str) -> bool:
    return path.startswith(WRITE_PATHS)


class WriteEndpointsHandler(WSGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        # Django builds a chain from settings.MIDDLEWARE only: the short list stands in for it while this one handler
        # is built, once per process, before any request.
        full = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.WRITE_ENDPOINT_MIDDLEWARE
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = full
