"""Callback authentication over real HTTP: the relay fetches the fake issuer's JWK set like GitHub's."""

import pytest

from ootci.models import CallbackRejection, JobResult
from tests.fakes.oidc import SigningKey, reporter_body

NIGHTLY = reporter_body("nightly.completed")


def test_a_valid_token_names_the_caller(downstream):
    ci = downstream()

    response = ci.post(NIGHTLY)

    assert response.status_code == 200, response.text
    assert JobResult.objects.get().backend == ci.backend


def test_it_rejects_a_callback_without_a_token(downstream):
    ci = downstream()

    for token in ("", "Bearer", "Bearer   "):
        response = ci.post(NIGHTLY, headers={"Authorization": token})
        assert response.status_code == 401
        assert response.json()["detail"].startswith("Missing authorization token")
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert list(CallbackRejection.objects.values_list("repo", "status_code")) == [("", 401)] * 3


def test_it_accepts_the_bearer_prefix_in_any_case(downstream, oidc_issuer):
    ci = downstream()

    response = ci.post(NIGHTLY, headers={"Authorization": "bearer " + oidc_issuer.token(repository=ci.repo)})

    assert response.status_code == 200, response.text


def _detail(ci, token: str) -> str:
    response = ci.post(NIGHTLY, token=token)
    assert response.status_code == 401, response.text
    return response.json()["detail"]


def test_it_rejects_a_token_that_is_not_a_jwt(downstream):
    ci = downstream()

    assert "not a well-formed JWT" in _detail(ci, "not.a.token")


def test_it_rejects_a_token_for_another_audience(downstream, oidc_issuer):
    ci = downstream()

    detail = _detail(ci, oidc_issuer.token(repository=ci.repo, audience="sigstore"))

    assert detail == "The token is not for this relay: its audience must be 'pytorch-cross-repo-ci-relay'."


def test_it_rejects_a_token_from_another_issuer_without_fetching_keys(downstream, oidc_issuer):
    ci = downstream()

    detail = _detail(ci, oidc_issuer.token(repository=ci.repo, issuer="https://evil.example.com"))

    assert detail.startswith("The token was issued by 'https://evil.example.com'; only")
    assert oidc_issuer.jwks_requests == 0


def test_it_rejects_an_expired_token(downstream, oidc_issuer):
    ci = downstream()

    assert _detail(ci, oidc_issuer.token(repository=ci.repo, issued_ago=1000, expires_in=300)) == (
        "The token has expired."
    )


def test_it_allows_a_little_clock_skew(downstream, oidc_issuer):
    ci = downstream()
    just_expired = oidc_issuer.token(repository=ci.repo, issued_ago=330, expires_in=300)
    from_the_future = oidc_issuer.token(repository=ci.repo, issued_ago=-20)

    assert ci.post(NIGHTLY, token=just_expired).status_code == 200
    assert ci.post(NIGHTLY, token=from_the_future).status_code == 200


def test_it_rejects_a_token_issued_in_the_future(downstream, oidc_issuer):
    ci = downstream()

    assert "not valid yet" in _detail(ci, oidc_issuer.token(repository=ci.repo, issued_ago=-600))


def test_it_rejects_a_token_without_expiry(downstream, oidc_issuer):
    ci = downstream()

    assert _detail(ci, oidc_issuer.token(repository=ci.repo, drop=("exp",))) == "The token lacks the 'exp' claim."


def test_it_rejects_a_token_without_a_repository_claim(downstream, oidc_issuer):
    ci = downstream()

    assert "no 'repository' claim" in _detail(ci, oidc_issuer.token(repository=None))


def test_it_rejects_a_token_with_a_forged_signature(downstream, oidc_issuer):
    ci = downstream()
    impostor = SigningKey(kid=oidc_issuer.signing_key.kid)  # claims a published key id, signs with its own key

    assert _detail(ci, oidc_issuer.token(repository=ci.repo, key=impostor)) == "The token's signature does not verify."


def test_it_rejects_a_token_signed_with_a_shared_secret(downstream, oidc_issuer):
    ci = downstream()

    assert "only RS256 is accepted" in _detail(ci, oidc_issuer.token(repository=ci.repo, algorithm="HS256"))


def test_it_rejects_a_token_signed_by_an_unpublished_key(downstream, oidc_issuer):
    ci = downstream()

    detail = _detail(ci, oidc_issuer.token(repository=ci.repo, key=SigningKey()))

    assert "is not published by" in detail


def test_it_caches_the_key_set(downstream, oidc_issuer):
    ci = downstream()

    for _ in range(3):
        assert ci.post(NIGHTLY).status_code == 200

    assert oidc_issuer.jwks_requests == 1


def test_it_refetches_the_key_set_for_a_new_key_id(downstream, oidc_issuer, settings):
    settings.OIDC_JWKS_REFRESH_COOLDOWN_SECONDS = 0
    ci = downstream()
    assert ci.post(NIGHTLY).status_code == 200
    oidc_issuer.rotate()

    response = ci.post(NIGHTLY)  # signed with the new key

    assert response.status_code == 200, response.text
    assert oidc_issuer.jwks_requests == 2


def test_unknown_key_ids_refetch_at_most_once_per_cooldown(downstream, oidc_issuer):
    ci = downstream()
    assert ci.post(NIGHTLY).status_code == 200

    for _ in range(3):
        assert "is not published by" in _detail(ci, oidc_issuer.token(repository=ci.repo, kid="made-up"))

    assert oidc_issuer.jwks_requests == 1


@pytest.mark.parametrize("down", ["answers 503", "unreachable"])
def test_it_answers_503_when_the_key_set_cannot_be_fetched(downstream, oidc_issuer, settings, down):
    ci = downstream()
    if down == "unreachable":
        settings.OIDC_JWKS_URL = "http://127.0.0.1:9/.well-known/jwks"
    else:
        oidc_issuer.down = True

    response = ci.post(NIGHTLY)

    assert response.status_code == 503
    assert "signing keys could not be fetched" in response.json()["detail"]
    assert int(response.headers["Retry-After"]) > 0
    assert not JobResult.objects.exists()
