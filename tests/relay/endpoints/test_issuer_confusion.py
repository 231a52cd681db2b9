"""Issuer confusion, over real HTTP against both fake issuers: a token is verified with the keys of the issuer it
names, and only that issuer's identity rule reads it. Every case is a 401 (or 403) with a ``detail``, nothing stored.
"""

import base64
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from ootci.models import BuildkitePipeline, JobResult
from tests.fakes.buildkite import FakeBuildkite
from tests.fakes.oidc import AUDIENCE, FakeOidcIssuer, SigningKey, reporter_body

NIGHTLY = reporter_body("nightly.completed")


@pytest.fixture
def both(downstream, buildkite):
    """One L2 backend that reports from GitHub Actions (its repo) and from a mapped Buildkite pipeline (``job``)."""
    ci = downstream()
    job = buildkite.job()
    BuildkitePipeline.objects.create(
        backend=ci.backend, organization_id=job.organization_id, pipeline_id=job.pipeline_id
    )
    return ci, job


def refused(ci, token: str, status: int = 401) -> str:
    response = ci.post(NIGHTLY, token=token)
    assert response.status_code == status, response.text
    assert not JobResult.objects.exists()
    return response.json()["detail"]


def b64(value) -> str:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_both_issuers_are_accepted_for_their_own_identities(both, oidc_issuer, buildkite):
    ci, job = both

    assert ci.post(NIGHTLY, token=oidc_issuer.token(repository=ci.repo)).status_code == 200
    assert ci.post(NIGHTLY, token=buildkite.token(job=job)).status_code == 200


def test_a_github_key_cannot_sign_for_buildkite(both, oidc_issuer, buildkite):
    ci, job = both
    token = buildkite.token(job=job, key=oidc_issuer.signing_key)  # names Buildkite, signed with GitHub's key

    assert refused(ci, token).endswith("is not published by https://agent.buildkite.com.")


def test_a_buildkite_key_cannot_sign_for_github(both, oidc_issuer, buildkite):
    ci, _ = both
    token = oidc_issuer.token(repository=ci.repo, key=buildkite.signing_key)

    assert refused(ci, token).endswith(f"is not published by {oidc_issuer.issuer}.")


def test_a_key_id_both_issuers_publish_does_not_join_their_keys(both, oidc_issuer, buildkite):
    ci, job = both
    buildkite.keys.append(SigningKey(kid=oidc_issuer.signing_key.kid))  # the same kid in both sets, other keys

    github_signed = buildkite.token(job=job, key=oidc_issuer.signing_key)

    assert refused(ci, github_signed) == "The token's signature does not verify."


def test_a_github_token_carrying_buildkite_claims_is_refused(both, oidc_issuer):
    ci, job = both
    token = oidc_issuer.token(repository=ci.repo, organization_id=job.organization_id, pipeline_id=job.pipeline_id)

    assert refused(ci, token).startswith("A GitHub Actions token carries Buildkite's organization_id, pipeline_id")


def test_a_buildkite_token_with_a_repository_claim_is_refused(both, buildkite):
    ci, job = both

    assert refused(ci, buildkite.token(job=job, repository=ci.repo)).startswith("A Buildkite token carries a 'repo")


@pytest.mark.parametrize("iss", ["https://agent.buildkite.com/", "https://AGENT.buildkite.com", "agent.buildkite.com"])
def test_an_issuer_is_matched_exactly(both, buildkite, iss):
    ci, job = both

    assert refused(ci, buildkite.token(job=job, issuer=iss)).startswith(f"The token was issued by {iss!r}; only")
    assert buildkite.jwks_requests == 0


def test_buildkite_can_be_turned_off_in_the_settings(both, buildkite, settings):
    ci, job = both
    settings.OIDC_BUILDKITE_ISSUER = ""

    assert "https://agent.buildkite.com" in refused(ci, buildkite.token(job=job)).split(";")[0]


@pytest.mark.parametrize("alg", ["none", "HS256", "RS512", "PS256", "rs256"])
def test_only_rs256_is_accepted_from_either_issuer(both, buildkite, alg):
    ci, job = both
    public_pem = buildkite.signing_key.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = {"alg": alg, "typ": "JWT", "kid": buildkite.signing_key.kid}
    now = int(time.time())
    claims = {"iss": buildkite.issuer, "aud": AUDIENCE, "iat": now, "exp": now + 300}
    claims |= {"organization_id": job.organization_id, "pipeline_id": job.pipeline_id}
    signing_input = f"{b64(header)}.{b64(claims)}"
    # HS256 keyed with the published public key: the classic confusion of a verifier that takes alg from the token.
    signature = jwt.algorithms.HMACAlgorithm(jwt.algorithms.HMACAlgorithm.SHA256).sign(
        signing_input.encode(), public_pem
    )
    token = f"{signing_input}.{b64(signature) if alg != 'none' else ''}"

    assert "only RS256 is accepted" in refused(ci, token)


def test_a_key_carried_or_pointed_to_by_the_token_is_never_used(both, buildkite):
    ci, job = both
    attacker = FakeOidcIssuer().start()
    try:
        own = attacker.signing_key
        headers = {"jku": attacker.jwks_url, "jwk": own.jwk(), "x5u": attacker.jwks_url}
        claims = {"iss": buildkite.issuer, "aud": AUDIENCE, "iat": int(time.time()), "exp": int(time.time()) + 300}
        claims |= {"organization_id": job.organization_id, "pipeline_id": job.pipeline_id}
        token = jwt.encode(claims, own.private, algorithm="RS256", headers={"kid": own.kid, **headers})

        assert refused(ci, token).endswith("is not published by https://agent.buildkite.com.")
        assert attacker.jwks_requests == 0
    finally:
        attacker.stop()


@pytest.mark.parametrize("kid", ["", "../../.well-known/jwks", "x" * 5000])
def test_made_up_key_ids_are_refused(both, buildkite, kid):
    ci, job = both

    detail = refused(ci, buildkite.token(job=job, kid=kid))

    assert "names no signing key" in detail or "is not published by" in detail


def test_a_buildkite_token_of_another_audience_or_expired_is_refused(both, buildkite):
    ci, job = both

    assert "audience must be" in refused(ci, buildkite.token(job=job, audience="https://buildkite.com/vllm"))
    assert refused(ci, buildkite.token(job=job, issued_ago=1000)) == "The token has expired."


@pytest.mark.parametrize(
    "claims",
    [{"organization_id": "vllm"}, {"pipeline_id": 7}, {"organization_id": ""}, {"pipeline_id": ["a", "b"]}],
)
def test_identity_claims_that_are_not_uuids_are_refused(both, buildkite, claims):
    ci, job = both

    assert "are not UUIDs" in refused(ci, buildkite.token(job=job, **claims))


def test_the_buildkite_key_set_down_answers_503_and_github_goes_on(both, oidc_issuer, buildkite):
    ci, job = both
    buildkite.down = True

    response = ci.post(NIGHTLY, token=buildkite.token(job=job))

    assert response.status_code == 503 and int(response.headers["Retry-After"]) > 0
    assert "Buildkite signing keys could not be fetched" in response.json()["detail"]
    assert ci.post(NIGHTLY, token=oidc_issuer.token(repository=ci.repo)).status_code == 200


def test_a_second_buildkite_issuer_on_the_same_key_set_is_not_trusted(both, settings):
    ci, job = both
    impostor = FakeBuildkite().start()
    try:
        token = impostor.token(job=job)  # names agent.buildkite.com, signed by a key Buildkite does not publish

        assert "is not published by" in refused(ci, token)
    finally:
        impostor.stop()
