"""Callback tokens: put into every dispatch's client_payload, echoed back by downstream CI.

A token is bound to one (delivery id, backend repo) pair and signed with the project's secret key, so a callback can
prove it answers a dispatch we sent to that repository. It expires after CALLBACK_TOKEN_MAX_AGE_DAYS (GitHub keeps a
run re-runnable for 30 days): a token that never expires would be a standing key to report on that delivery.
"""

from django.conf import settings
from django.core import signing

SALT = "ootci.relay.callback-token"


def callback_token_issue(*, delivery_id: str, repo: str) -> str:
    return signing.dumps({"d": delivery_id, "r": repo.lower()}, salt=SALT, compress=True)


def callback_token_problem(token: str, *, delivery_id: str, repo: str) -> str:
    """Why ``token`` does not let a callback report on this delivery and repo ("" when it does): not ours, issued for
    another delivery or repo, or older than CALLBACK_TOKEN_MAX_AGE_DAYS."""
    max_age = settings.CALLBACK_TOKEN_MAX_AGE_DAYS * 86400
    try:
        claims = signing.loads(token, salt=SALT, max_age=max_age)
    except signing.SignatureExpired:
        days = settings.CALLBACK_TOKEN_MAX_AGE_DAYS
        return f"The callback_token of delivery {delivery_id!r} expired: tokens last {days:g} days."
    except (signing.BadSignature, ValueError, TypeError):
        claims = None
    if isinstance(claims, dict) and claims.get("d") == delivery_id and claims.get("r") == repo.lower():
        return ""
    return f"The callback_token was not issued for delivery {delivery_id!r} to {repo}."


def callback_token_matches(token: str, *, delivery_id: str, repo: str) -> bool:
    """True when ``token`` is ours, unexpired, and was issued for exactly this delivery and repo."""
    return not callback_token_problem(token, delivery_id=delivery_id, repo=repo)
