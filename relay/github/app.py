"""The GitHub App's identity and GitHub's answers: installation tokens, and the two exceptions callers see.

The relay acts as a GitHub App. Installation tokens are minted on demand (App JWT → repository installation → access
token), kept in this process until shortly before they expire, and never used past that. The hot calls (a fan-out's
dispatches) go through ``installation_request``: one pool of kept-alive connections per process, shared by its
threads, so that a fan-out pays for no connect (nor, against GitHub, a TLS handshake) once the pool is warm. Callers get
one of two exceptions, so no PyGithub, requests or urllib3 type leaks out: ``GitHubError`` (``retryable`` says whether
trying again may help) and its subclass ``RateLimited`` (``wait_seconds`` says how long GitHub asked us to wait).
"""

import functools
import json
import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import requests
import urllib3
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from django.conf import settings
from github import Auth, Github, GithubException, GithubIntegration

# A token this close to its expiry is treated as expired: a request may take a while to reach GitHub.
TOKEN_EXPIRY_MARGIN = timedelta(minutes=2)


# GitHub's secondary rate limits do not always say when they end; its documentation says to wait a minute.
DEFAULT_RATE_LIMIT_WAIT = 60.0


class GitHubError(Exception):
    def __init__(self, message: str, *, status: int = 0, retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable


class RateLimited(GitHubError):
    def __init__(self, message: str, *, status: int, wait_seconds: float) -> None:
        super().__init__(message, status=status, retryable=True)
        self.wait_seconds = wait_seconds


@dataclass(frozen=True)
class _Token:
    token: str
    expires_at: datetime


_lock = threading.Lock()


_installations: dict[tuple[str, str, str], int] = {}


_tokens: dict[tuple[str, str, int], _Token] = {}


_mint_locks: dict[tuple[str, str, int], threading.Lock] = {}


_pools: dict[int, urllib3.PoolManager] = {}  # by process id: a forked worker must not share its parent's sockets


# GitHub's REST API version the raw requests are written for, and the name it asks every client to send.
API_HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "OOT-CI"}


def installation_client(*, repo: str) -> Github:
    """A PyGithub client authenticated as the App's installation on ``repo``.

    A new client per call: PyGithub clients are not meant to be shared between threads.
    """
    return Github(auth=Auth.Token(installation_token(repo=repo)), **_client_options())


def installation_request(
    method: str, path: str, *, repo: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    """One request to the REST API as the App's installation on ``repo``: (status, headers, text), any status.

    On this process's pooled connections (urllib3's pool is thread-safe), without retries or redirects: the callers
    own their retry policy. An unreachable GitHub raises a retryable ``GitHubError``.
    """
    token = installation_token(repo=repo)
    data = None if body is None else json.dumps(body).encode()
    sent = {**API_HEADERS, "Authorization": f"token {token}", **(headers or {})}
    if data is not None:
        sent["Content-Type"] = "application/json"
    timeout = urllib3.Timeout(connect=settings.GITHUB_TIMEOUT_SECONDS, read=settings.GITHUB_TIMEOUT_SECONDS)
    try:
        response = _pool().request(
            method, settings.GITHUB_API_URL + path, body=data, headers=sent, timeout=timeout, retries=False
        )
    except urllib3.exceptions.HTTPError as e:
        raise GitHubError(f"GitHub unreachable for {repo}: {e}", retryable=True) from e
    return response.status, dict(response.headers), response.data.decode(errors="replace")


def _pool() -> urllib3.PoolManager:
    pool = _pools.get(os.getpid())
    if pool is None:
        # As many kept-alive connections per host as a fan-out has requests in flight; more are opened and dropped.
        pool = _pools.setdefault(os.getpid(), urllib3.PoolManager(num_pools=4, maxsize=settings.DISPATCH_CONCURRENCY))
    return pool


def installation_token(*, repo: str) -> str:
    installation_id = _installation_id(repo)
    key = (settings.GITHUB_API_URL, str(settings.GITHUB_APP_ID), installation_id)
    with _lock:
        mint_lock = _mint_locks.setdefault(key, threading.Lock())
    # One mint per installation at a time: 32 threads dispatching to one org must not mint 32 tokens.
    with mint_lock:
        cached = _tokens.get(key)
        if cached and cached.expires_at - TOKEN_EXPIRY_MARGIN > datetime.now(UTC):
            return cached.token
        try:
            granted = _integration().get_access_token(installation_id)
        except GithubException as e:
            raise error_from(e.status, e.headers or {}, e.data, f"installation token for {repo}") from e
        except requests.RequestException as e:
            raise GitHubError(f"GitHub unreachable minting a token for {repo}: {e}", retryable=True) from e
        expires_at = granted.expires_at or datetime.now(UTC) + timedelta(minutes=10)
        _tokens[key] = _Token(granted.token, expires_at)
        return granted.token


def tokens_forget(*, repo: str | None = None) -> None:
    """Drop cached installation ids and tokens: for ``repo``'s installation, or all of them."""
    with _lock:
        if repo is None:
            _installations.clear()
            _tokens.clear()
            return
        installation_id = _installations.pop(_installation_key(repo), None)
        _tokens.pop((settings.GITHUB_API_URL, str(settings.GITHUB_APP_ID), installation_id), None)


def _installation_id(repo: str) -> int:
    key = _installation_key(repo)
    if key in _installations:
        return _installations[key]
    owner, name = repo.split("/", 1)
    try:
        installation = _integration().get_repo_installation(owner, name)
    except GithubException as e:
        if e.status == 404:
            raise GitHubError(f"the GitHub App is not installed on {repo} (404)", status=404) from e
        raise error_from(e.status, e.headers or {}, e.data, f"installation lookup for {repo}") from e
    except requests.RequestException as e:
        raise GitHubError(f"GitHub unreachable looking up {repo}: {e}", retryable=True) from e
    with _lock:
        _installations[key] = installation.id
    return installation.id


def github_reachable(*, repo: str) -> bool:
    """Whether GitHub answers the App at all — an installation lookup of ``repo``, never cached: any HTTP answer
    counts, a revoked App's 401 or 404 included; a connection failure or a 5xx does not."""
    owner, name = repo.split("/", 1)
    try:
        _integration().get_repo_installation(owner, name)
    except GithubException as e:
        return e.status < 500
    except (requests.RequestException, GitHubError):
        return False
    return True


def _installation_key(repo: str) -> tuple[str, str, str]:
    return (settings.GITHUB_API_URL, str(settings.GITHUB_APP_ID), repo.lower())


def _integration() -> GithubIntegration:
    if not settings.GITHUB_APP_ID or not settings.GITHUB_APP_PRIVATE_KEY:
        raise GitHubError("GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY are not configured")
    pem = settings.GITHUB_APP_PRIVATE_KEY
    auth = Auth.AppAuth(int(settings.GITHUB_APP_ID), lambda: _private_key(pem))
    return GithubIntegration(auth=auth, **_client_options())


@functools.lru_cache(maxsize=4)
def _private_key(pem: str) -> Any:
    # Loading (and validating) an RSA key costs tens of milliseconds under the GIL; a fan-out of 100
    # would spend seconds on it. Signing with the loaded key is cheap.
    return load_pem_private_key(pem.encode(), password=None)


def _client_options() -> dict[str, Any]:
    return {
        "base_url": settings.GITHUB_API_URL,
        "timeout": settings.GITHUB_TIMEOUT_SECONDS,
        "retry": None,
        "seconds_between_requests": None,
        "seconds_between_writes": None,
        "lazy": True,
    }


def error_from(status: int, headers: dict[str, Any], data: Any, what: str) -> GitHubError:
    message = data.get("message", "") if isinstance(data, dict) else str(data or "")
    text = f"GitHub {status} on {what}: {message}".rstrip(": ")
    wait = rate_limit_wait(status, headers, message)
    if wait is not None:
        return RateLimited(f"{text} (rate limited; retry in {wait:.0f} s)", status=status, wait_seconds=wait)
    # 5xx is GitHub's trouble; 401 after a revoked token and 408/409 are worth another try.
    retryable = status >= 500 or status in (401, 408, 409)
    return GitHubError(text, status=status, retryable=retryable)


def rate_limit_wait(status: int, headers: dict[str, Any], message: str) -> float | None:
    """Seconds to wait when GitHub answered with a rate limit; None for any other answer."""
    if status not in (403, 429):
        return None
    h = {k.lower(): str(v) for k, v in headers.items()}
    if h.get("retry-after", "").strip().isdigit():
        return float(h["retry-after"])
    if h.get("x-ratelimit-remaining") == "0" and h.get("x-ratelimit-reset", "").isdigit():
        return max(0.0, int(h["x-ratelimit-reset"]) - time.time()) + 1
    if status == 429 or "rate limit" in message.lower():
        return DEFAULT_RATE_LIMIT_WAIT
    return None  # a plain 403 is a permission problem, not a reason to wait


def json_or_text(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return text[:500]


# Answers after which the repo's installation id and token are looked up again: a revoked token, or the App
# reinstalled. A run's listing answers 404 for a run that is not there (``RUN_MISSING``): not a token's fault.
TOKEN_SUSPECT = (401, 404)
RUN_MISSING = (401,)


def calling(repo: str, what: str, call: Any, *, forget_on: tuple[int, ...] = TOKEN_SUSPECT) -> Any:
    """Run a PyGithub ``call``; its exceptions become ours (``GitHubError``/``RateLimited``). An answer in
    ``forget_on`` drops the repo's cached installation and token."""
    try:
        return call()
    except GithubException as e:
        if e.status in forget_on:
            tokens_forget(repo=repo)
        raise error_from(e.status, e.headers or {}, e.data, what) from e
    except requests.RequestException as e:
        raise GitHubError(f"GitHub unreachable for {repo}: {e}", retryable=True) from e
