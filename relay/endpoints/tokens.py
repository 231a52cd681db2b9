"""Callback tokens: put into every dispatch's client_payload, echoed back by downstream CI.

A token is bound to one (delivery id, backend repo) pair and signed with the project's secret key,
so a callback can prove it answers a dispatch we sent to that repository.
"""

from django.core import signing

SALT = "ootci.relay.callback-token"


def callback_token_issue(*, delivery_id: str, repo: str) -> str:
    return signing.dumps({"d": delivery_id, "r": repo.lower()}, salt=SALT, compress=True)


def callback_token_matches(token: str, *, delivery_id: str, repo: str) -> bool:
    """True when ``token`` is ours and was issued for exactly this delivery and repo."""
    try:
        claims = signing.loads(token, salt=SALT)
    except (signing.BadSignature, ValueError, TypeError):
        return False
    return isinstance(claims, dict) and claims.get("d") == delivery_id and claims.get("r") == repo.lower()
