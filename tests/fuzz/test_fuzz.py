"""Property-based fuzzing of every way in: signed webhooks, callbacks with valid tokens, hostile tokens, HUD and API
query strings (the failing-tests view, failures, readiness and badge URLs among them), tokens of one issuer dressed as
the other's (GitHub Actions and Buildkite: keys, `iss`, identity claims, `alg` and `kid` mixed), CRCR ingest bodies,
and the untrusted uploads — test reports and job logs as zip, tar, gzip and XML bombs, path tricks, truncations, wrong
content types and encodings (tests/fuzz/archives.py). The property: every answer is 2xx, 3xx or 4xx, a JSON
endpoint's 4xx carries a ``detail``, and a refused request writes no row.

The seed is fixed (derandomize): a run finds what the previous one found. FUZZ_EXAMPLES sets the examples per
target (``make test``: the default below; ``make fuzz``: a larger budget). Requests sent and 5xx seen are printed
at the end of the module (``-s``).
"""

import json
import os
import time
import uuid
from collections import Counter
from urllib.parse import quote

import pytest
from cryptography.hazmat.primitives import serialization
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jwt.algorithms import HMACAlgorithm, RSAAlgorithm

from ootci.models import BuildkitePipeline, Delivery, Dispatch, JobResult, PullRequest
from tests.fakes.oidc import AUDIENCE, Downstream, SigningKey, reporter_body
from tests.fuzz import archives
from tests.fuzz import strategies as hostile
from tests.hud import scenario
from tests.relay.conftest import UPSTREAM, fixture_json, sign
from tests.relay.endpoints.test_ingest import forwarded

pytestmark = pytest.mark.django_db

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "250"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
WEBHOOKS = [
    ("pull_request", "pull_request.opened.payload"),
    ("pull_request", "pull_request.synchronize.payload"),
    ("pull_request", "pull_request.labeled.payload"),
    ("pull_request", "pull_request.closed.payload"),
    ("push", "push.payload"),
    ("check_run", "check_run.rerequested.payload"),
    ("check_suite", "check_suite.rerequested.payload"),
    ("ping", "ping.payload"),
]
HUD_PATHS = [
    "/oot/",
    "/oot/failures/",
    "/oot/acme/npu/?view=failing-tests",
    "/oot/acme/npu/readiness/",
    "/oot/acme/npu/badge.svg",
    "/api/oot/acme/npu/failing-tests/",
    "/api/oot/acme/npu/readiness/",
    "/api/oot/acme/npu/jobs/1/tests/",
    "/oot/metrics/",
    "/oot/pr/",
    "/oot/pr/101/",
    "/oot/acme/npu/",
    "/oot/acme/npu/jobs/1/",
    "/oot/acme/npu/disabled-tests.json",
    "/api/oot/",
    "/api/oot/metrics/",
    "/api/oot/allowlist/",
    "/api/oot/pr/101/",
    "/api/oot/acme/npu/",
    "/api/oot/acme/npu/jobs/1/",
    "/oot/tests/",
    "/oot/tests/test/test_a.py::test_a/",
    "/api/oot/tests/",
    "/api/oot/tests/test/test_a.py::test_a/",
]
PARAMETERS = ["days", "page", "event", "failing", "number", "format", "q", "view", "pr", "after"]
INGEST_TOKEN = "hud-bot-token-for-fuzzing"
INGEST_FOCUS = (
    ("trusted",),
    ("untrusted", "callback_payload", "workflow"),
    ("untrusted", "callback_payload", "delivery_id"),
)
REPORTS = ["pull_request.in_progress", "pull_request.completed.failure", "nightly.completed"]
# Header values arrive decoded as latin-1 (WSGI): any of its characters, nothing beyond.
header_text = st.text(st.characters(max_codepoint=255), max_size=40)

answers: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def tally():
    yield
    print(f"\nfuzz: {answers['requests']} requests, {answers['5xx']} answered 5xx ({EXAMPLES} examples per target)")
    print("  " + ", ".join(f"{answers[k]} {k}" for k in sorted(answers) if k.endswith("answers")))


def rows() -> tuple[int, ...]:
    return tuple(model.objects.count() for model in (Delivery, Dispatch, PullRequest, JobResult))


def send(call, *, json_api: bool = True):
    """Send one request and check the property; ``call`` makes the request with the test client."""
    before = rows()
    answers["requests"] += 1
    try:
        response = call()
    except Exception:
        answers["5xx"] += 1  # the test client re-raises what the server would answer 500
        raise
    answers[f"{response.status_code // 100}xx answers"] += 1
    if response.status_code >= 500:
        answers["5xx"] += 1
    assert response.status_code < 500, response.content[:500]
    if response.status_code >= 400:
        assert rows() == before, f"a refused request ({response.status_code}) wrote a row"
        if json_api:
            assert "detail" in response.json(), response.content[:500]
    return response


@pytest.fixture
def relay(settings, make_backend):
    settings.UPSTREAM_REPO = UPSTREAM
    settings.CALLBACK_RATE_LIMIT_PER_MIN = 10**9  # the limit is tested elsewhere; here it would hide the body
    settings.GITHUB_APP_ID = str(fixture_json("check_run.rerequested.payload")["check_run"]["app"]["id"])
    make_backend(repo="org/npu", level="L4", device="npu")
    make_backend(repo="org/xpu", level="L3", device="xpu")
    return make_backend(repo="org/cpu", level="L2")


@FUZZ
@given(data=st.data())
def test_signed_webhooks(client, settings, relay, data):
    event, name = data.draw(st.sampled_from(WEBHOOKS))
    payload = fixture_json(name)
    payload["repository"]["full_name"] = UPSTREAM
    body = data.draw(hostile.mutations(payload).map(hostile.dumps) | st.binary(max_size=100), label="body")
    headers = {
        "X-GitHub-Event": data.draw(st.just(event) | header_text, label="event"),
        "X-GitHub-Delivery": data.draw(st.uuids().map(str) | header_text, label="delivery"),
        "X-Hub-Signature-256": data.draw(
            st.just(sign(body, settings.GITHUB_WEBHOOK_SECRET)) | header_text, label="signature"
        ),
    }

    send(lambda: client.post("/github/webhook", data=body, content_type="application/json", headers=headers))


@pytest.fixture
def downstream_ci(relay, oidc_issuer, make_backend):
    """A new L2 backend and a dispatch to it: one per example, so that the flood guard on recorded refusals
    (per repo and minute) never stops recording them (recording is part of what is fuzzed)."""

    def make() -> tuple[Downstream, Dispatch]:
        ci = Downstream("http://unused", oidc_issuer, make_backend(repo=f"org/{uuid.uuid4().hex}", level="L2"))
        return ci, ci.dispatch()

    return make


@FUZZ
@given(data=st.data())
def test_callbacks_with_valid_tokens(client, downstream_ci, data):
    ci, dispatch = downstream_ci()
    name = data.draw(st.sampled_from(["pull_request.in_progress", "pull_request.completed.failure"]))
    body = reporter_body(name, delivery_id=dispatch.delivery.delivery_id, run_id=str(uuid.uuid4()))
    body = data.draw(st.sampled_from([body, reporter_body("nightly.completed")]), label="recorded")
    raw = data.draw(
        hostile.mutations(body, focus=(("workflow",), ("delivery_id",), ("event_type",))).map(hostile.dumps)
        | st.binary(max_size=100),
        label="body",
    )
    token = ci.issuer.token(repository=ci.repo)

    send(
        lambda: client.post(
            "/github/callback", data=raw, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
        )
    )


@st.composite
def tokens(draw, issuer, repo: str) -> str:
    """A token signed by the issuer's real key whose header and claims may be anything, or no JWT at all."""
    key = issuer.signing_key
    header = {"alg": "RS256", "typ": "JWT", "kid": key.kid}
    header = draw(hostile.mutations(header, at_most=2) | st.just(header), label="header")
    if draw(st.booleans()):
        header = {**header, "crit": draw(hostile.hostile_values)} if isinstance(header, dict) else header
    now = int(time.time())
    claims = {"iss": issuer.issuer, "aud": AUDIENCE, "iat": now, "exp": now + 300, "repository": repo}
    claims = draw(hostile.mutations(claims, at_most=2) | st.just(claims), label="claims")
    signing_input = f"{hostile.b64url(header)}.{hostile.b64url(claims)}"
    signature = RSAAlgorithm(RSAAlgorithm.SHA256).sign(signing_input.encode(), key.private)
    token = f"{signing_input}.{hostile.b64url(signature)}"
    return draw(st.just(token) | header_text | st.just(token + "." + token), label="token")


@FUZZ
@given(data=st.data())
def test_hostile_token_headers_and_claims(client, downstream_ci, data):
    ci, _ = downstream_ci()
    token = data.draw(tokens(ci.issuer, ci.repo))
    body = hostile.dumps(reporter_body("nightly.completed"))

    send(
        lambda: client.post(
            "/github/callback", data=body, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
        )
    )


ATTACKER = SigningKey()  # published by neither issuer


@st.composite
def confused_tokens(draw, issuers: dict[str, object], repo: str, ids: dict[str, str]) -> tuple[str, dict]:
    """A token signed by one party's key that names any issuer, carries any issuer's identity claims, and may bend its
    ``alg`` and ``kid``; with what it was made of."""
    keys = {"github": issuers["github"].signing_key, "buildkite": issuers["buildkite"].signing_key, "none": ATTACKER}
    made = {
        "signer": draw(st.sampled_from(list(keys)), label="signer"),
        "named": draw(st.sampled_from(["github", "buildkite", "other"]), label="named"),
        "identity": draw(st.sampled_from(["repository", "pipeline", "both", "neither"]), label="identity"),
        "alg": draw(st.sampled_from(["RS256", "RS256", "RS256", "RS512", "HS256", "none"]), label="alg"),
    }
    key = keys[made["signer"]]
    made["kid"] = draw(st.sampled_from([key.kid, *(k.kid for k in keys.values()), "made-up", ""]), label="kid")
    now = int(time.time())
    iss = {"github": issuers["github"].issuer, "buildkite": issuers["buildkite"].issuer}.get(made["named"], "https://x")
    claims: dict = {"iss": iss, "aud": AUDIENCE, "iat": now, "exp": now + 300}
    if made["identity"] in ("repository", "both"):
        claims["repository"] = repo
    if made["identity"] in ("pipeline", "both"):
        claims |= ids
    extra = st.sampled_from(["build_branch", "organization_slug", "pipeline_slug", "sub", "repository_owner"])
    claims |= draw(st.dictionaries(extra, hostile.hostile_values, max_size=2), label="extra claims")
    header = {"alg": made["alg"], "typ": "JWT", "kid": made["kid"]}
    signing_input = f"{hostile.b64url(header)}.{hostile.b64url(claims)}".encode()
    if made["alg"] == "HS256":  # keyed with the public key: the alg confusion
        public = key.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        signature = HMACAlgorithm(HMACAlgorithm.SHA256).sign(signing_input, public)
    elif made["alg"] == "none":
        signature = b""
    else:
        digest = RSAAlgorithm.SHA256 if made["alg"] == "RS256" else RSAAlgorithm.SHA512
        signature = RSAAlgorithm(digest).sign(signing_input, key.private)
    return f"{signing_input.decode()}.{hostile.b64url(signature)}", made


@FUZZ
@given(data=st.data())
def test_tokens_of_one_issuer_dressed_as_the_other(client, downstream_ci, buildkite, data):
    """The property beyond the module's: a token is accepted only when signed by the key of the issuer it names,
    RS256, under that key's own id, carrying that issuer's identity and not the other's."""
    ci, _ = downstream_ci()
    ids = {"organization_id": str(uuid.uuid4()), "pipeline_id": str(uuid.uuid4())}
    BuildkitePipeline.objects.create(backend=ci.backend, **ids)
    token, made = data.draw(confused_tokens({"github": ci.issuer, "buildkite": buildkite}, ci.repo, ids))
    body = hostile.dumps(reporter_body("nightly.completed"))

    response = send(
        lambda: client.post(
            "/github/callback", data=body, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
        )
    )

    if response.status_code < 300:
        own = {"github": "repository", "buildkite": "pipeline"}.get(made["named"])
        assert (made["signer"], made["alg"], made["identity"]) == (made["named"], "RS256", own), made


@st.composite
def hud_urls(draw) -> str:
    segment = hostile.hostile_text.map(lambda s: quote(s, safe="", errors="surrogatepass") or "x")
    number = st.integers(min_value=0, max_value=10**25)
    hostile_path = (
        st.builds("/oot/{}/{}/".format, segment, segment)
        | st.builds("/api/oot/{}/{}/jobs/{}/".format, segment, segment, number)
        | st.builds("/oot/pr/{}/".format, number)
        | st.builds("/api/oot/pr/{}/".format, number)
        | st.builds("/oot/tests/{}/".format, segment)
        | st.builds("/api/oot/tests/{}/".format, segment)
    )
    # Mostly pages that exist, so that their parameters are read; a fifth of the time a path of hostile parts.
    path = draw(st.sampled_from(HUD_PATHS) if draw(st.integers(0, 4)) else hostile_path)
    value = st.sampled_from(["²", "³", "٣٠", "1" * 5000, "-1", "30", "push", "yaml"]) | hostile.hostile_text
    params = draw(st.dictionaries(st.sampled_from(PARAMETERS) | hostile.any_text, value, min_size=1, max_size=4))
    return f"{path}?{hostile.query_string(params)}"


@settings(FUZZ, max_examples=max(1, EXAMPLES // 3))  # a page computes its figures: several times the cost of a post
@given(url=hud_urls())
def test_hud_and_api_query_strings(client, db, url):
    if not JobResult.objects.exists():
        scenario.build()

    send(lambda: client.get(url), json_api=url.startswith("/api/"))


@pytest.fixture
def ingest(settings, make_backend):
    settings.HUD_INGEST_TOKEN = INGEST_TOKEN
    make_backend(repo="ascend/pytorch-npu", level="L3")


@FUZZ
@given(data=st.data())
def test_crcr_ingest_bodies(client, ingest, data):
    name = data.draw(st.sampled_from(REPORTS))
    body = data.draw(hostile.mutations(forwarded(name, queue_time=12.5), focus=INGEST_FOCUS), label="body")
    raw = hostile.dumps(body)
    raw = data.draw(st.just(raw) | st.just(json.dumps(raw.decode()).encode()) | st.binary(max_size=100), label="raw")

    send(
        lambda: client.post(
            "/api/crcr/results", data=raw, content_type="application/json", headers={"x-hud-internal-bot": INGEST_TOKEN}
        )
    )


# --- the untrusted uploads: test reports and job logs --------------------------------------------------------------


@pytest.fixture
def uploads(downstream_ci, client, settings, tmp_path):
    """A failed job attempt of a fresh backend (completed over the callback) and its upload query."""
    settings.TEST_REPORTS_URL = tmp_path.as_uri()

    def make() -> tuple[Downstream, dict[str, str]]:
        ci, dispatch = downstream_ci()
        body = reporter_body("pull_request.completed.failure", delivery_id=dispatch.delivery.delivery_id)
        token = f"Bearer {ci.issuer.token(repository=ci.repo)}"
        sent = json.dumps(body)
        client.post("/github/callback", data=sent, content_type="application/json", HTTP_AUTHORIZATION=token)
        workflow = body["workflow"]
        query = {"delivery_id": body["delivery_id"], "workflow": workflow["name"], "job": workflow["job_name"]}
        return ci, query | {"run_id": workflow["run_id"], "run_attempt": workflow["run_attempt"]}

    return make


@st.composite
def upload_requests(draw, query: dict[str, str]) -> tuple[dict[str, str], bytes, str]:
    if draw(st.integers(0, 3)) == 0:  # a quarter of the time the query is hostile too
        query = draw(hostile.mutations(query, at_most=2).filter(lambda q: isinstance(q, dict)) | st.just(query))
        query = {str(k): str(v) for k, v in query.items()}
    body = draw(st.sampled_from(archives.bodies()) | st.binary(max_size=2000), label="body")
    return query, body, draw(st.sampled_from(archives.CONTENT_TYPES), label="content type")


@settings(FUZZ, max_examples=max(1, EXAMPLES // 5))  # a parse per example: the dearest target
@given(data=st.data())
@pytest.mark.parametrize("endpoint", ["/github/test-report", "/github/job-log"])
def test_uploaded_reports_and_logs(client, uploads, endpoint, data):
    ci, query = uploads()
    query, body, content_type = data.draw(upload_requests(query))
    token = ci.issuer.token(repository=ci.repo)
    headers = {"Authorization": f"Bearer {token}"}
    if data.draw(st.booleans(), label="gzip transfer"):
        headers["Content-Encoding"] = "gzip"
    url = f"{endpoint}?{hostile.query_string(query)}"

    send(lambda: client.post(url, data=body, content_type=content_type, headers=headers))
