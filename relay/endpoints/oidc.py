"""Verify the OIDC token a downstream CI job sends with its callback and uploads, and say whom it speaks for.

Issuers and their key sets are trust anchors: they come from the settings only, never from the database or a request.

- **GitHub Actions** (``OIDC_ISSUER``, keys at ``OIDC_JWKS_URL``): the ``repository`` claim is the caller.
- **Buildkite** (``OIDC_BUILDKITE_ISSUER``, keys at ``OIDC_BUILDKITE_JWKS_URL``): its tokens name no repository. The
  caller is the backend its ``organization_id/pipeline_id`` (immutable UUIDs; slugs can be renamed and re-claimed) is
  mapped to in the database (``ootci.models.BuildkitePipeline``), provided the token carries the mapping's required
  claims (``build_branch: [main]`` keeps a fork build of the same pipeline out).

The issuer is chosen by the token's `iss` before any key is fetched, and the token is then verified against that
issuer's keys only, with that issuer expected: a token signed by one issuer's key cannot pass as the other's. A token
names one CI system: a GitHub Actions token carrying Buildkite's identity claims, or a Buildkite token with a
``repository`` claim, is refused rather than read one way or the other.

Both mint RS256 tokens and publish their keys as a JWK set. Each key set is cached in process (PyJWT's PyJWKClient,
5 minutes) and refetched once when a token names a key id we have not seen (keys rotate), at most every
OIDC_JWKS_REFRESH_COOLDOWN_SECONDS so that tokens with made-up key ids cannot turn us into a load generator against
an issuer. Each process reads the pipeline map whole at most every OIDC_IDENTITY_MAP_SECONDS, so an edit takes effect
within that time without a restart; while the database is down the last map read stays in use (a verified callback
can then be journaled), and a process that never read it answers 503.
"""

import base64
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import jwt
from django.conf import settings
from django.db import InterfaceError, OperationalError

from ootci.models import Backend, BuildkitePipeline, claims_unmet
from relay.endpoints import checked

# A compact JWS of three unpadded base64url parts (RFC 7515 §7.1): read without PyJWT to choose the issuer.
COMPACT_TOKEN = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
# Issuers mint tokens with iat = now; a little leeway absorbs clock skew between their clocks and ours.
LEEWAY_SECONDS = 60
JWKS_LIFESPAN_SECONDS = 300
JWKS_TIMEOUT_SECONDS = 5
REQUIRED_CLAIMS = ["exp", "iat", "iss", "aud"]
REPOSITORY_MAX_LENGTH = checked.max_length(Backend, "repo")
UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
# Claims only Buildkite mints: a GitHub Actions token carrying one of them is not what GitHub sends.
BUILDKITE_IDENTITY_CLAIMS = ("organization_id", "pipeline_id", "organization_slug", "pipeline_slug")
MAP_RETRY_SECONDS = 5  # while the database is down, how often a process tries to read the map again
ASK_FOR_CLAIMS = (
    "request them in the step with `buildkite-agent oidc request-token --claim organization_id,pipeline_id` "
    "(or BUILDKITE_OIDC_TOKEN_CLAIMS=organization_id,pipeline_id in its environment)"
)

_clients: dict[tuple[str, float], jwt.PyJWKClient] = {}
_clients_lock = threading.Lock()
logger = logging.getLogger(__name__)


class OidcError(Exception):
    """The token is missing or not acceptable; ``detail`` says why (answered as 401)."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


class OidcUnavailable(OidcError):
    """The issuer's key set or the pipeline map could not be read: our problem, not the caller's (answered 503)."""


class OidcRefused(OidcError):
    """A valid token of a CI identity that may not report (as this backend, or at all): answered 403. ``repo`` is the
    backend it would have reported as, when it is mapped to one."""

    def __init__(self, detail: str, *, repo: str = ""):
        super().__init__(detail)
        self.repo = repo


@dataclass(frozen=True)
class Issuer:
    name: str
    url: str  # the `iss` its tokens carry
    jwks_url: str
    caller: Callable[[dict], str]  # the verified claims → the calling backend's repository


def issuers() -> dict[str, Issuer]:
    """The trusted issuers by their `iss`, from the settings (read on each call: tests override them)."""
    found = {settings.OIDC_ISSUER: Issuer("GitHub Actions", settings.OIDC_ISSUER, settings.OIDC_JWKS_URL, github_repo)}
    if settings.OIDC_BUILDKITE_ISSUER:
        url = settings.OIDC_BUILDKITE_ISSUER
        found[url] = Issuer("Buildkite", url, settings.OIDC_BUILDKITE_JWKS_URL, buildkite_repo)
    return found


def github_repo(claims: dict) -> str:
    carried = [name for name in BUILDKITE_IDENTITY_CLAIMS if name in claims]
    if carried:
        raise OidcError(
            f"A GitHub Actions token carries Buildkite's {', '.join(carried)} claim(s): a token names one CI system."
        )
    repository = claims.get("repository")
    if not isinstance(repository, str) or "/" not in repository:
        raise OidcError("The token has no 'repository' claim naming the calling org/repo.")
    try:
        return checked.text(repository, field="The token's 'repository' claim", max_length=REPOSITORY_MAX_LENGTH)
    except checked.Unchecked as e:
        raise OidcError(e.detail) from e


def buildkite_repo(claims: dict) -> str:
    if "repository" in claims:
        raise OidcError(
            "A Buildkite token carries a 'repository' claim, which Buildkite does not mint: a Buildkite pipeline is "
            "identified by its organization_id/pipeline_id, mapped to a backend by OOT CI."
        )
    org, pipeline = claims.get("organization_id"), claims.get("pipeline_id")
    if org is None or pipeline is None:
        raise OidcError(f"The Buildkite token has no organization_id and pipeline_id claims: {ASK_FOR_CLAIMS}.")
    if not (isinstance(org, str) and isinstance(pipeline, str) and UUID.match(org) and UUID.match(pipeline)):
        raise OidcError("The Buildkite token's organization_id and pipeline_id claims are not UUIDs.")
    key = f"{org}/{pipeline}".lower()
    slugs = claims.get("organization_slug"), claims.get("pipeline_slug")
    named = f"{slugs[0]}/{slugs[1]} ({key})" if all(isinstance(s, str) for s in slugs) else key
    named = checked.display_text(named)[:250]
    mapped = pipeline_map().get(key)
    if mapped is None:
        raise OidcRefused(
            f"Buildkite pipeline {named} is not mapped to an OOT CI backend: ask the OOT CI admins to add its "
            "organization_id/pipeline_id to the backend's Buildkite pipelines (admin, or import_ci_providers)."
        )
    repo, required = mapped
    if unmet := claims_unmet(required, claims):
        detail = f"Buildkite pipeline {named} reports as {repo} only from its own builds: {unmet}."
        raise OidcRefused(checked.display_text(detail)[:1000], repo=repo)
    return repo


_map: dict[str, tuple[str, dict]] | None = None
_map_read_at = 0.0
_map_lock = threading.Lock()


def pipeline_map() -> dict[str, tuple[str, dict]]:
    """``<organization_id>/<pipeline_id>`` → (repo, required claims), read at most every OIDC_IDENTITY_MAP_SECONDS."""
    global _map, _map_read_at
    with _map_lock:
        now = time.monotonic()
        if _map is not None and now - _map_read_at < settings.OIDC_IDENTITY_MAP_SECONDS:
            return _map
        try:
            rows = BuildkitePipeline.objects.values_list(
                "organization_id", "pipeline_id", "backend__repo", "required_claims"
            )
            _map = {f"{o}/{p}": (repo, claims or {}) for o, p, repo, claims in rows}
            _map_read_at = now
        except (OperationalError, InterfaceError) as e:
            if _map is None:
                raise OidcUnavailable("The Buildkite pipeline map cannot be read now; retry shortly.") from e
            logger.warning("the Buildkite pipeline map cannot be read (%s): the last one read stays in use", e)
            _map_read_at = now - settings.OIDC_IDENTITY_MAP_SECONDS + MAP_RETRY_SECONDS
        return _map


def oidc_repository_verify(*, authorization: str, at: datetime | None = None) -> str:
    """The repository of the backend an ``Authorization: Bearer <token>`` header value speaks for (its issuer's
    identity rule, above); its expiry checked as of ``at`` when given (a journaled callback,
    replayed after its token expired: relay.reliability.journal). OidcRefused when the token is valid but its CI
    identity may not report."""
    token = _bearer_token(authorization)
    header, unverified = _unverified(token)
    if header.get("alg") != "RS256":
        raise OidcError(f"The token is signed with {header.get('alg')!r}; only RS256 is accepted.")
    trusted = issuers()
    named = unverified.get("iss")
    # Chosen before any key lookup: a token from another issuer must not make us fetch keys at all.
    issuer = trusted.get(named) if isinstance(named, str) else None
    if issuer is None:
        accepted = " or ".join(repr(url) for url in trusted)
        raise OidcError(f"The token was issued by {named!r}; only {accepted} is accepted.")
    claims = _verified_claims(token, header.get("kid"), issuer, at)
    return issuer.caller(claims)


def _unverified(token: str) -> tuple[dict, dict]:
    """The token's header and claims, unverified: only to choose its issuer (PyJWT verifies it whole after).

    A plain compact token is read here: PyJWT's reading checks each of its ~1,700 characters in Python, 0.16 ms, and
    the verification reads it again. Anything else (padding, a header with ``crit`` or ``b64``, a ``kid`` that is not a
    string, text that is not JSON objects) is read by PyJWT, which says what is wrong with it."""
    if COMPACT_TOKEN.fullmatch(token):
        try:
            header, claims = (
                json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))) for part in token.split(".")[:2]
            )
        except (ValueError, RecursionError):  # binascii.Error and JSONDecodeError are ValueErrors
            header = claims = None
        if (
            isinstance(header, dict)
            and isinstance(claims, dict)
            and isinstance(header.get("kid", ""), str)
            and not header.keys() & {"crit", "b64"}
        ):
            return header, claims
    try:
        found = jwt.api_jwt.decode_complete(token, options={"verify_signature": False})
    except jwt.InvalidTokenError as e:  # a malformed header too: kid not a string, crit entries we do not support
        raise OidcError(f"The authorization token is not a well-formed JWT ({e}).") from e
    return found["header"], found["payload"]


def _bearer_token(authorization: str) -> str:
    value = (authorization or "").strip()
    scheme, _, rest = value.partition(" ")
    if scheme.lower() == "bearer":  # the prefix is optional, as for the reference relay
        value = rest.strip()
    if not value:
        raise OidcError("Missing authorization token: send 'Authorization: Bearer <OIDC token>'.")
    return value


def _verified_claims(token: str, kid: str | None, issuer: Issuer, at: datetime | None = None) -> dict:
    if not kid:
        raise OidcError("The token names no signing key (no 'kid' in its header).")
    try:
        key = _jwks_client(issuer.jwks_url).get_signing_key(kid)
    except jwt.PyJWKClientConnectionError as e:
        raise OidcUnavailable(f"The {issuer.name} signing keys could not be fetched; retry shortly ({e}).") from e
    except jwt.PyJWKClientError as e:
        raise OidcError(f"The token's signing key (kid {kid!r}) is not published by {issuer.url}.") from e
    try:
        claims = jwt.decode(
            token,
            key.key,
            algorithms=["RS256"],
            audience=settings.OIDC_AUDIENCE,
            issuer=issuer.url,
            leeway=LEEWAY_SECONDS,
            options={"require": REQUIRED_CLAIMS, "verify_exp": at is None},
        )
        if at is not None and float(claims["exp"]) + LEEWAY_SECONDS < at.timestamp():
            raise jwt.ExpiredSignatureError("expired when it arrived")
        return claims
    except jwt.ExpiredSignatureError as e:
        raise OidcError("The token has expired.") from e
    except jwt.InvalidAudienceError as e:
        raise OidcError(f"The token is not for this relay: its audience must be {settings.OIDC_AUDIENCE!r}.") from e
    except jwt.ImmatureSignatureError as e:
        raise OidcError("The token is not valid yet (its iat or nbf is in the future).") from e
    except jwt.MissingRequiredClaimError as e:
        raise OidcError(f"The token lacks the {e.claim!r} claim.") from e
    except jwt.InvalidSignatureError as e:
        raise OidcError("The token's signature does not verify.") from e
    except jwt.InvalidTokenError as e:
        raise OidcError(f"The token is not valid: {e}.") from e
    except (TypeError, ValueError, OverflowError) as e:  # a signed claim PyJWT cannot read, e.g. "exp": Infinity
        raise OidcError(f"The token's time claims are not numbers PyJWT can read ({e}).") from e


def _jwks_client(url: str) -> jwt.PyJWKClient:
    """One client per key set URL, shared by all threads: its cache is what saves a fetch per callback."""
    cache_key = (url, settings.OIDC_JWKS_REFRESH_COOLDOWN_SECONDS)
    with _clients_lock:
        client = _clients.get(cache_key)
        if client is None:
            client = jwt.PyJWKClient(
                url,
                lifespan=JWKS_LIFESPAN_SECONDS,
                timeout=JWKS_TIMEOUT_SECONDS,
                cooldown_duration=settings.OIDC_JWKS_REFRESH_COOLDOWN_SECONDS,
            )
            _clients[cache_key] = client
        return client
