"""Verify the OIDC token a downstream CI job sends with its callback; the `repository` claim is the caller.

GitHub Actions mints RS256 tokens; its public keys are published as a JWK set at OIDC_JWKS_URL. The key
set is cached in process (PyJWT's PyJWKClient, 5 minutes) and refetched once when a token names a key id
we have not seen (keys rotate), at most every OIDC_JWKS_REFRESH_COOLDOWN_SECONDS so that tokens with
made-up key ids cannot turn us into a load generator against the issuer.
"""

import threading
from datetime import datetime

import jwt
from django.conf import settings

from ootci.models import Backend
from relay.endpoints import checked

# GitHub mints tokens with iat = now; a little leeway absorbs clock skew between its clock and ours.
LEEWAY_SECONDS = 60
JWKS_LIFESPAN_SECONDS = 300
JWKS_TIMEOUT_SECONDS = 5
REQUIRED_CLAIMS = ["exp", "iat", "iss", "aud"]
REPOSITORY_MAX_LENGTH = checked.max_length(Backend, "repo")

_clients: dict[tuple[str, float], jwt.PyJWKClient] = {}
_clients_lock = threading.Lock()


class OidcError(Exception):
    """The token is missing or not acceptable; ``detail`` says why (answered as 401)."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


class OidcUnavailable(OidcError):
    """The issuer's key set could not be fetched: our problem, not the caller's (answered as 503)."""


def oidc_repository_verify(*, authorization: str, at: datetime | None = None) -> str:
    """The verified ``repository`` claim of an ``Authorization: Bearer <token>`` header value; its expiry checked
    as of ``at`` when given (a journaled callback, replayed after its token expired: relay.reliability.journal)."""
    token = _bearer_token(authorization)
    try:
        unverified = jwt.api_jwt.decode_complete(token, options={"verify_signature": False})
    except jwt.InvalidTokenError as e:  # a malformed header too: kid not a string, crit entries we do not support
        raise OidcError(f"The authorization token is not a well-formed JWT ({e}).") from e
    header, unverified = unverified["header"], unverified["payload"]
    if header.get("alg") != "RS256":
        raise OidcError(f"The token is signed with {header.get('alg')!r}; only RS256 is accepted.")
    issuer = unverified.get("iss")
    # Checked before any key lookup: a token from another issuer must not make us fetch keys at all.
    if issuer != settings.OIDC_ISSUER:
        raise OidcError(f"The token was issued by {issuer!r}; only {settings.OIDC_ISSUER!r} is accepted.")
    claims = _verified_claims(token, header.get("kid"), at)
    repository = claims.get("repository")
    if not isinstance(repository, str) or "/" not in repository:
        raise OidcError("The token has no 'repository' claim naming the calling org/repo.")
    try:
        return checked.text(repository, field="The token's 'repository' claim", max_length=REPOSITORY_MAX_LENGTH)
    except checked.Unchecked as e:
        raise OidcError(e.detail) from e


def _bearer_token(authorization: str) -> str:
    value = (authorization or "").strip()
    scheme, _, rest = value.partition(" ")
    if scheme.lower() == "bearer":  # the prefix is optional, as for the reference relay
        value = rest.strip()
    if not value:
        raise OidcError("Missing authorization token: send 'Authorization: Bearer <OIDC token>'.")
    return value


def _verified_claims(token: str, kid: str | None, at: datetime | None = None) -> dict:
    if not kid:
        raise OidcError("The token names no signing key (no 'kid' in its header).")
    try:
        key = _jwks_client().get_signing_key(kid)
    except jwt.PyJWKClientConnectionError as e:
        raise OidcUnavailable(f"The issuer's signing keys could not be fetched; retry shortly ({e}).") from e
    except jwt.PyJWKClientError as e:
        raise OidcError(f"The token's signing key (kid {kid!r}) is not published by {settings.OIDC_ISSUER}.") from e
    try:
        claims = jwt.decode(
            token,
            key.key,
            algorithms=["RS256"],
            audience=settings.OIDC_AUDIENCE,
            issuer=settings.OIDC_ISSUER,
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


def _jwks_client() -> jwt.PyJWKClient:
    """One client per key set URL, shared by all threads: its cache is what saves a fetch per callback."""
    cache_key = (settings.OIDC_JWKS_URL, settings.OIDC_JWKS_REFRESH_COOLDOWN_SECONDS)
    with _clients_lock:
        client = _clients.get(cache_key)
        if client is None:
            client = jwt.PyJWKClient(
                settings.OIDC_JWKS_URL,
                lifespan=JWKS_LIFESPAN_SECONDS,
                timeout=JWKS_TIMEOUT_SECONDS,
                cooldown_duration=settings.OIDC_JWKS_REFRESH_COOLDOWN_SECONDS,
            )
            _clients[cache_key] = client
        return client
