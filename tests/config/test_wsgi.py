"""gunicorn's entry point (config.wsgi): the relay's write endpoints answer through their own short middleware chain,
the HUD's pages through the full one."""

import io
import json

import pytest

from relay.endpoints.tokens import callback_token_issue
from tests.fakes.oidc import Downstream

pytestmark = pytest.mark.django_db(transaction=True)  # the handler closes a connection left in a transaction


@pytest.fixture(autouse=True)
def _starts(settings, monkeypatch):
    # The tests' folder store and Redis are what the deployment checks refuse when DEBUG is off, as pytest runs;
    # the browser tests' plugin sets DJANGO_ALLOW_ASYNC_UNSAFE, which Django's own deployment check refuses, and
    # which the database calls need after a browser test ran in this process.
    settings.SILENCED_SYSTEM_CHECKS = ["relay.E001", "relay.E003"]
    with monkeypatch.context() as started:  # only while gunicorn's entry point starts: a browser test run earlier in
        started.delenv("DJANGO_ALLOW_ASYNC_UNSAFE", raising=False)  # this process left its event loop in the thread
        import config.wsgi  # noqa: F401


def call(path: str, *, method: str = "GET", body: bytes = b"", headers: dict | None = None):
    from config.wsgi import application

    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": "127.0.0.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": io.StringIO(),
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json",
        **(headers or {}),
    }
    answer: dict = {}

    def start_response(status, response_headers, exc_info=None):
        answer["status"], answer["headers"] = int(status.split()[0]), dict(response_headers)

    chunks = application(environ, start_response)
    answer["body"] = b"".join(chunks)
    chunks.close()
    return answer


def test_a_callback_answers_without_the_huds_middleware(oidc_issuer, make_backend):
    ci = Downstream("http://unused", oidc_issuer, make_backend(repo="org-wsgi/pytorch-npu"))
    dispatch = ci.dispatch()
    body = ci.body("pull_request.in_progress", dispatch)
    body["callback_token"] = callback_token_issue(delivery_id=dispatch.delivery.delivery_id, repo=ci.repo)
    token = oidc_issuer.token(repository=ci.repo)

    answer = call(
        "/github/callback",
        method="POST",
        body=json.dumps(body).encode(),
        headers={"HTTP_AUTHORIZATION": f"Bearer {token}"},
    )

    assert answer["status"] == 200 and json.loads(answer["body"])["status"] == "in_progress"
    assert "Content-Security-Policy" not in answer["headers"]  # no CSP, session or clickjacking work on JSON
    assert "X-Frame-Options" not in answer["headers"] and "Vary" not in answer["headers"]
    assert answer["headers"]["X-Content-Type-Options"] == "nosniff"  # the security middleware stays


def test_an_unknown_relay_path_is_a_json_404_and_pages_keep_their_headers():
    missing = call("/github/nothing-here")
    assert missing["status"] == 404 and "detail" in json.loads(missing["body"])

    page = call("/oot/")
    assert page["status"] == 200
    assert "Content-Security-Policy" in page["headers"] and page["headers"]["X-Frame-Options"] == "DENY"
