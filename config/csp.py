"""Content-Security-Policy for every response (Django 5.2 has none built in; 6.0's is not available here).

Scripts, styles, fonts and fetches come from this site only; no inline script or ``style=""`` attribute runs, so
an injected tag in a PR title or a test name can do nothing. The HUD's templates and the admin's hold none;
``data:`` images are allowed for the icons stylesheets embed. No page may be framed.
"""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


def content_security_policy(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[..., HttpResponse]:
    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        response.headers.setdefault("Content-Security-Policy", POLICY)
        return response

    return middleware
