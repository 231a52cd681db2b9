"""Callback tokens: put into every dispatch's client_payload, echoed back by downstream CI.

A token is bound to one (delivery id, backend repo) pair and signed with the project's secret key, so a callback can
prove it answers a dispatch we sent to that repository. It expires after CALLBACK_TOKEN_MAX_AGE_DAYS (GitHub keeps a
run re-runnable for 30 days): a token that never expires would be a standing key to report on that delivery.
"""

import threading
import time

from django.conf import settings
from django.core import signing

SALT = "ootci.relay.callback-token"
# Tokens this process verified, with when each expires: every shard of a run echoes its dispatch's token, and checking
# the signature (a key derivation and an HMAC) was 4 % of the web's CPU for a callback. Not kept: tokens that fail.
VERIFIED_KEPT = 1024
_verified: dict[tuple, tuple[dict, float]] = {}
_lock = threading.Lock()


def callback_token_issue(*, delivery_id: str, repo: str) -> str:
    return signing.dumps({"d": delivery_id, "r": repo.lower()}, salt=SALT, compress=True)


def callback_token_problem(token: str, *, delivery_id: str, repo: str) -> str:
    """Why ``token`` does not let a callback report on this delivery and repo ("" when it does): not ours, issued for
    another delivery or repo, or older than CALLBACK_TOKEN_MAX_AGE_DAYS."""
    max_age = settings.CALLBACK_TOKEN_MAX_AGE_DAYS * 86400
    expired = f"The callback_token of delivery {delivery_id!r} expired: tokens last {max_age / 86400:g} days."
    key = (token, max_age, settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS)
    if (known := _verified.get(key)) is None:
        try:
            claims = signing.loads(token, salt=SALT, max_age=max_age)
        except signing.SignatureExpired:
            return expired
        except (signing.BadSignature, ValueError, TypeError):
            claims = None
        else:  # signed by us: when it expires is in it
            known = (claims, signing.b62_decode(token.rsplit(":", 2)[1]) + max_age)
            with _lock:
                _verified[key] = known
                while len(_verified) > VERIFIED_KEPT:
                    _verified.pop(next(iter(_verified)))
    if known is not None:
        claims, expires = known
        if time.time() > expires:
            return expired
    if isinstance(claims, dict) and claims.get("d") == delivery_id and claims.get("r") == repo.lower():
        return ""
    return f"The callback_token was not issued for delivery {delivery_id!r} to {repo}."


def callback_token_matches(token: str, *, delivery_id: str, repo: str) -> bool:
    """True when ``token`` is ours, unexpired, and was issued for exactly this delivery and repo."""
    return not callback_token_problem(token, delivery_id=delivery_id, repo=repo)
