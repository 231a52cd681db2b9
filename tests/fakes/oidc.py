"""The downstream side of callbacks: a fake OIDC issuer over real HTTP and a fake downstream CI.

``FakeOidcIssuer`` holds RSA keys, serves them as a JWK set that PyJWT's PyJWKClient fetches, and mints
tokens like GitHub Actions; every claim can be bent (``issuer.token(repository="org/repo",
audience="someone-else")``), ``rotate()`` publishes a new signing key and ``jwks_requests`` counts fetches.
``Downstream`` is one backend's CI: it holds the dispatches we sent it and posts the recorded reporter
bodies (``callbacks/*.json``) with its own token.
"""

import json
import secrets
import threading
import time
import uuid
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import requests
from cryptography.hazmat.primitives.asymmetric import rsa
from django.utils import timezone

from ootci.models import Delivery, Dispatch, PullRequest
from relay.endpoints.tokens import callback_token_issue
from tests.fakes.github import POLL

AUDIENCE = "pytorch-cross-repo-ci-relay"
JWKS_PATH = "/.well-known/jwks"
# Bodies exactly as the public cross-repo-ci-relay-callback action's reporter sends them.
CALLBACKS = Path(__file__).parent / "callbacks"
HEAD = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"  # the PR head SHA in those bodies
NIGHTLY_SHA = "5e4d1f0c9b8a7e6d5c4b3a29181716151413121a"


def reporter_body(name: str, *, delivery_id: str | None = None, callback_token: str | None = None, **workflow) -> dict:
    """A recorded callback body (``pull_request.in_progress``, ``pull_request.completed.failure``,
    ``nightly.completed``) for another delivery, with the echoed token and ``workflow`` fields replaced."""
    body = json.loads((CALLBACKS / f"{name}.json").read_text())
    if delivery_id is not None:
        body["delivery_id"] = delivery_id
    if callback_token is not None:
        body["callback_token"] = callback_token
    body["workflow"].update(workflow)
    return body


class SigningKey:
    def __init__(self, kid: str | None = None):
        self.kid = kid or secrets.token_hex(8)
        self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwk(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key()))
        return {**public, "kid": self.kid, "use": "sig", "alg": "RS256"}


class FakeOidcIssuer:
    def __init__(self):
        self.keys = [SigningKey()]
        self.jwks_requests = 0
        self.down = False  # answer 503 to key set requests
        # A path of its own: a later issuer may get this one's port, and the relay caches key sets by URL.
        self.prefix = "/" + secrets.token_hex(6)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def issuer(self) -> str:
        return self.url + self.prefix

    @property
    def jwks_url(self) -> str:
        return self.issuer + JWKS_PATH

    @property
    def signing_key(self) -> SigningKey:
        return self.keys[-1]

    def start(self) -> "FakeOidcIssuer":
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(POLL,), daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def rotate(self) -> SigningKey:
        """Publish a new key (the old one stays published, as GitHub does) and sign new tokens with it."""
        with self._lock:
            self.keys.append(SigningKey())
        return self.signing_key

    def token(
        self,
        *,
        repository: str | None,
        audience: str = AUDIENCE,
        issuer: str | None = None,
        expires_in: int = 300,
        issued_ago: int = 0,
        key: SigningKey | None = None,
        kid: str | None = None,
        algorithm: str = "RS256",
        drop: tuple[str, ...] = (),
        **claims: Any,
    ) -> str:
        """A token as GitHub Actions mints it for a job of ``repository``; every part can be bent for a test."""
        identity = {
            "sub": f"repo:{repository}:ref:refs/heads/main",
            "repository": repository,
            "repository_owner": (repository or "").split("/")[0],
            "ref": "refs/heads/main",
            "event_name": "repository_dispatch",
        }
        if repository is None:
            identity.pop("repository")
        return self.signed(
            identity | claims,
            audience,
            issuer,
            expires_in,
            issued_ago,
            key=key,
            kid=kid,
            algorithm=algorithm,
            drop=drop,
        )

    def signed(
        self,
        claims: dict[str, Any],
        audience: str,
        issuer: str | None,
        expires_in: int,
        issued_ago: int,
        *,
        key: SigningKey | None,
        kid: str | None,
        algorithm: str,
        drop: tuple[str, ...],
    ) -> str:
        """``claims`` with the registered ones (``iss``, ``aud``, ``iat``, ``nbf``, ``exp``), signed; ``drop`` removes
        any of them, ``kid`` replaces the key's id in the header, ``HS256`` signs with a shared secret."""
        now = int(time.time()) - issued_ago
        payload = {"iss": issuer or self.issuer, "aud": audience, "iat": now, "nbf": now, "exp": now + expires_in}
        payload |= claims
        for name in drop:
            payload.pop(name, None)
        key = key or self.signing_key
        if algorithm == "HS256":
            return jwt.encode(payload, "a-shared-secret-of-32-bytes-long!", algorithm="HS256", headers={"kid": key.kid})
        return jwt.encode(payload, key.private, algorithm=algorithm, headers={"kid": key.kid if kid is None else kid})

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path != fake.prefix + JWKS_PATH:
                    return self._answer(404, {"message": "Not Found"})
                with fake._lock:
                    fake.jwks_requests += 1
                    keys = [k.jwk() for k in fake.keys]
                if fake.down:
                    return self._answer(503, {"message": "unavailable"})
                return self._answer(200, {"keys": keys})

            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        return Handler


class Downstream:
    """One allowlisted backend repo and its CI: dispatches we sent it, and callbacks it posts like the reporter."""

    def __init__(self, url: str, issuer, backend):
        self.url = url + "/github/callback"
        self.issuer = issuer
        self.backend = backend
        self.repo = backend.repo

    def dispatch(self, *, delivery_id: str | None = None, sent_ago: float = 30, event: str = "pull_request"):
        delivery_id = delivery_id or str(uuid.uuid4())
        pr = None
        if event == "pull_request":
            pr, _ = PullRequest.objects.get_or_create(
                upstream_repo="pytorch/pytorch", number=4242, defaults={"head_sha": HEAD, "title": "Fix add"}
            )
        delivery, _ = Delivery.objects.get_or_create(
            delivery_id=delivery_id,
            defaults={
                "event": event,
                "action": "synchronize" if pr else "",
                "upstream_repo": "pytorch/pytorch",
                "head_sha": HEAD,
                "pull_request": pr,
                "payload": {},
            },
        )
        return Dispatch.objects.create(
            delivery=delivery,
            backend=self.backend,
            status=Dispatch.Status.SENT,
            attempts=1,
            sent_at=timezone.now() - timedelta(seconds=sent_ago),
        )

    def body(self, name: str, dispatch=None, *, token: bool = True, **workflow) -> dict:
        delivery_id = dispatch.delivery.delivery_id if dispatch else None
        token_value = callback_token_issue(delivery_id=delivery_id, repo=self.repo) if dispatch and token else None
        return reporter_body(name, delivery_id=delivery_id, callback_token=token_value, **workflow)

    def post(self, body, *, token: str | None = None, headers: dict | None = None) -> requests.Response:
        data = body if isinstance(body, bytes | str) else json.dumps(body)
        token = self.issuer.token(repository=self.repo) if token is None else token
        sent = {"Content-Type": "application/json", "Authorization": f"Bearer {token}", **(headers or {})}
        return requests.post(self.url, data=data, headers=sent, timeout=30)
