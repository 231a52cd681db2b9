"""What the write endpoints of downstream CI share (callback, test-report and job-log uploads, CRCR ingest): refusals
as ``{"detail": ...}``, the body's size cap and JSON checks, and the caller's checks, cheapest and most trusted first:
its OIDC token, the allowlist, the rate limit."""

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection
from rest_framework import exceptions
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.request import Request
from rest_framework.views import APIView

from ootci import levels
from ootci.levels import Level
from ootci.models import Backend
from ootci.rows import prepared_cursor
from relay.endpoints import checked, oidc, ratelimit

# PositiveIntegerField columns hold at most this on PostgreSQL; larger numbers are bad input, not a crash.
MAX_COUNT = checked.INTEGER_RANGES["PositiveIntegerField"][1]
STORE_RETRY_SECONDS = 5
BACKEND_BY_REPO = f"SELECT {', '.join(Backend.CALLER_FIELDS)} FROM ootci_backend WHERE lower(repo) = lower(%s)"


class JsonAnswer(BaseContentNegotiation):
    """The write endpoints answer JSON, their only renderer, whatever the request's Accept header says, and parse
    their bodies themselves: DRF's default negotiation parsed the header on every callback (3 % of its CPU)."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class WriteApi(APIView):
    """A write endpoint of downstream CI: the caller is checked in ``post()`` (``verified_repo`` or a shared token),
    the raw body is size-checked before it is parsed or streamed, and the answer is JSON."""

    authentication_classes: list = []
    permission_classes: list = []
    parser_classes: list = []
    content_negotiation_class = JsonAnswer


class Refused(exceptions.APIException):
    """Any refusal: DRF renders it as ``{"detail": ...}`` with Retry-After / WWW-Authenticate when set."""

    def __init__(self, status_code: int, detail: str, *, wait: int | None = None, auth_header: str | None = None):
        super().__init__(checked.display_text(detail))  # a detail may quote the sender's text: keep it encodable
        self.status_code = status_code
        self.wait = wait
        self.auth_header = auth_header
        self.repo = ""  # the backend a refused caller would have reported as, when known


def body_size_check(request: Request, *, limit: int, too_large: str) -> None:
    """Refuse a body over ``limit`` bytes (413, ``too_large`` formatted with length and limit) before it is read."""
    length = request.META.get("CONTENT_LENGTH") or "0"
    if not (length.isascii() and length.isdigit()):
        raise Refused(400, "Content-Length is not a number.")
    if int(length) > limit:
        raise Refused(413, too_large.format(length=int(length), limit=limit))


def body_json(request: Request, *, display_only: tuple[str, ...] = ()) -> Any:
    """The parsed and checked JSON body (``relay.endpoints.checked.json_document``: no NaN, no deep nesting, no text
    PostgreSQL cannot store except in the ``display_only`` fields, where it is stripped), or a 400 that says why."""
    try:
        return checked.json_document(request.body, display_only=display_only)
    except checked.Unchecked as e:
        raise Refused(e.status, e.detail) from e


def verified_repo(request: Request, *, at: datetime | None = None) -> str:
    """The repository the request's OIDC token speaks for (GitHub Actions or a mapped Buildkite pipeline); 401 for a
    bad token, 403 for a valid one whose CI identity may not report (``repo`` set when it is mapped), 503."""
    try:
        return oidc.oidc_repository_verify(authorization=request.headers.get("Authorization", ""), at=at)
    except oidc.OidcUnavailable as e:
        raise Refused(503, e.detail, wait=STORE_RETRY_SECONDS) from e
    except oidc.OidcRefused as e:
        refused = Refused(403, e.detail)
        refused.repo = e.repo
        raise refused from e
    except oidc.OidcError as e:
        raise Refused(401, e.detail, auth_header='Bearer realm="ootci"') from e


def reporting_backend(repo: str) -> Backend:
    # Backend.objects.filter(repo__iexact=repo).first(), written out: it is on every callback, and the ORM takes
    # twice as long to compile it as PostgreSQL to run it. lower() is what the unique index on the repo is built on.
    with prepared_cursor() as cursor:
        cursor.execute(BACKEND_BY_REPO, [repo])
        row = cursor.fetchone()
    return backend_allowed(repo, Backend.from_db(connection.alias, Backend.CALLER_FIELDS, row) if row else None)


def backend_allowed(repo: str, backend: Backend | None) -> Backend:
    """``backend``, the allowlist's entry for ``repo`` (None: it has none), when it may report; else 403."""
    if backend is None:
        raise Refused(403, f"{repo} is not in the OOT CI allowlist.")
    if not backend.enabled:
        raise Refused(403, f"{repo} is disabled in the OOT CI allowlist.")
    if not levels.policy(backend.level).display_on_hud:
        raise Refused(403, f"{repo} is at {backend.level} (dispatch only): callbacks are accepted from {Level.L2} up.")
    return backend


def rate_limit(repo: str) -> None:
    limit = settings.CALLBACK_RATE_LIMIT_PER_MIN
    decision = ratelimit.rate_limit_hit(key=f"callback:{repo.lower()}", limit=limit)
    if not decision.allowed:
        raise Refused(
            429,
            f"Rate limit exceeded for {repo}: {limit} callbacks per minute; retry in {decision.retry_after} s.",
            wait=decision.retry_after,
        )
