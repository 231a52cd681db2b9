"""GitHub API client: the only module that uses PyGithub.

The relay acts as a GitHub App. Installation tokens are minted on demand (App JWT → repository
installation → access token), kept in this process until shortly before they expire, and never
used past that. Callers get one of two exceptions, so no PyGithub or requests type leaks out:
``GitHubError`` (``retryable`` says whether trying again may help) and its subclass ``RateLimited``
(``wait_seconds`` says how long GitHub asked us to wait).

PyGithub's own retry and throttling are switched off on purpose: the dispatch service owns the retry
policy (so that every try is counted on the Dispatch row), and concurrency is bounded by the
dispatch thread pool rather than by PyGithub's per-client sleeps (0.25 s per request, 1 s per write
by default), which would make a fan-out to 100 backends take minutes.
"""

import functools
import json
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, BinaryIO

import requests
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


def repository_dispatch_create(*, repo: str, event_type: str, client_payload: dict[str, Any]) -> None:
    """POST /repos/{repo}/dispatches as the App's installation on ``repo``; any non-2xx raises."""
    client = installation_client(repo=repo)
    body = {"event_type": event_type, "client_payload": client_payload}
    try:
        status, headers, text = client.requester.requestJson("POST", f"/repos/{repo}/dispatches", input=body)
    except requests.RequestException as e:
        raise GitHubError(f"GitHub unreachable for {repo}: {e}", retryable=True) from e
    if not 200 <= status < 300:
        if status in (401, 404):
            # The token may have been revoked or the App reinstalled: resolve both again next time.
            tokens_forget(repo=repo)
        raise _error(status, headers, _json(text), f"POST /repos/{repo}/dispatches")


def installation_client(*, repo: str) -> Github:
    """A PyGithub client authenticated as the App's installation on ``repo``.

    A new client per call: PyGithub clients are not meant to be shared between threads.
    """
    return Github(auth=Auth.Token(installation_token(repo=repo)), **_client_options())


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
            raise _error(e.status, e.headers or {}, e.data, f"installation token for {repo}") from e
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
        raise _error(e.status, e.headers or {}, e.data, f"installation lookup for {repo}") from e
    except requests.RequestException as e:
        raise GitHubError(f"GitHub unreachable looking up {repo}: {e}", retryable=True) from e
    with _lock:
        _installations[key] = installation.id
    return installation.id


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


def _error(status: int, headers: dict[str, Any], data: Any, what: str) -> GitHubError:
    message = data.get("message", "") if isinstance(data, dict) else str(data or "")
    text = f"GitHub {status} on {what}: {message}".rstrip(": ")
    wait = _rate_limit_wait(status, headers, message)
    if wait is not None:
        return RateLimited(f"{text} (rate limited; retry in {wait:.0f} s)", status=status, wait_seconds=wait)
    # 5xx is GitHub's trouble; 401 after a revoked token and 408/409 are worth another try.
    retryable = status >= 500 or status in (401, 408, 409)
    return GitHubError(text, status=status, retryable=retryable)


def _rate_limit_wait(status: int, headers: dict[str, Any], message: str) -> float | None:
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


def _json(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return text[:500]


# --- check runs and re-runs --------------------------------------------------------------------

# GitHub's answer to a re-run of a workflow run that is running (or re-running) already.
ALREADY_RUNNING = "already running"


def check_run_create(*, repo: str, fields: dict[str, Any]) -> int:
    """POST /repos/{repo}/check-runs; returns the new check run's id.

    ``fields`` are the keyword arguments of PyGithub's ``create_check_run`` (name, head_sha, status,
    conclusion, started_at/completed_at as datetimes, details_url, external_id, output).
    """
    client = installation_client(repo=repo)  # lazy: no GET of the repo before the POST
    what = f"POST /repos/{repo}/check-runs"
    return _calling(repo, what, lambda: client.get_repo(repo).create_check_run(**fields).id)


def check_run_update(*, repo: str, check_run_id: int, fields: dict[str, Any]) -> None:
    """PATCH /repos/{repo}/check-runs/{id} with ``fields`` (as for ``check_run_create``, name and head_sha aside)."""
    client = installation_client(repo=repo)
    what = f"PATCH /repos/{repo}/check-runs/{check_run_id}"
    # The client is lazy (_client_options): neither the repo nor the check run is fetched before the PATCH.
    _calling(repo, what, lambda: client.get_repo(repo).get_check_run(check_run_id).edit(**fields))


def check_run_find(*, repo: str, head_sha: str, name: str) -> int | None:
    """Our App's latest check run called ``name`` on commit ``head_sha``, or None.

    Used before creating a check run again after a failed try: GitHub may have created it and failed to say so.
    """
    client = installation_client(repo=repo)
    query = {"check_name": name, "app_id": str(settings.GITHUB_APP_ID), "filter": "latest", "per_page": 100}
    path = f"/repos/{repo}/commits/{head_sha}/check-runs"
    data = _calling(repo, f"GET {path}", lambda: client.requester.requestJsonAndCheck("GET", path, parameters=query)[1])
    ours = [run for run in data.get("check_runs") or [] if _app_id(run) == str(settings.GITHUB_APP_ID)]
    return max((int(run["id"]) for run in ours if run.get("name") == name), default=None)


def check_suite_check_runs(*, repo: str, check_suite_id: int) -> list[dict[str, Any]]:
    """Every check run of a check suite (GitHub's default ``filter=latest``: the latest run of each name).

    Each is ``{"id", "name", "external_id", "app_id"}``. Pages of 100 until a short page or ``total_count``.
    """
    path = f"/repos/{repo}/check-suites/{check_suite_id}/check-runs"
    return [
        {
            "id": run.get("id"),
            "name": run.get("name") or "",
            "external_id": run.get("external_id") or "",
            "app_id": _app_id(run),
        }
        for run in _listing(repo=repo, path=path, key="check_runs")
    ]


def _listing(*, repo: str, path: str, key: str) -> list[Any]:
    """Every item under ``key`` of a paged GET listing: pages of 100 until a short page or ``total_count``."""
    client = installation_client(repo=repo)
    items: list[Any] = []
    page = 1
    while True:
        query = {"per_page": 100, "page": page}
        data = _calling(
            repo, f"GET {path}", lambda q=query: client.requester.requestJsonAndCheck("GET", path, parameters=q)[1]
        )
        batch = data.get(key) or []
        items.extend(batch)
        if len(batch) < 100 or len(items) >= int(data.get("total_count") or 0):
            return items
        page += 1


def workflow_run_rerun_failed_jobs(*, repo: str, run_id: int) -> bool:
    """POST /repos/{repo}/actions/runs/{run_id}/rerun-failed-jobs as the App's installation on ``repo``.

    True when GitHub started the re-run, False when the run is already running (GitHub's 403, not an error).
    """
    client = installation_client(repo=repo)
    path = f"/repos/{repo}/actions/runs/{run_id}/rerun-failed-jobs"
    try:
        status, headers, text = client.requester.requestJson("POST", path)
    except requests.RequestException as e:
        raise GitHubError(f"GitHub unreachable for {repo}: {e}", retryable=True) from e
    if 200 <= status < 300:
        return True
    data = _json(text)
    message = data.get("message", "") if isinstance(data, dict) else str(data)
    if status == 403 and ALREADY_RUNNING in message.lower():
        return False
    if status in (401, 404):
        tokens_forget(repo=repo)
    raise _error(status, headers, data, f"POST {path}")


# --- issues and PR comments (on-call notifications, relay.alerts.notify)
# ----------------------------------------------------


def _send(repo: str, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    client = installation_client(repo=repo)
    return _calling(repo, f"{method} {path}", lambda: client.requester.requestJsonAndCheck(method, path, input=body)[1])


def issue_comment_create(*, repo: str, number: int, body: str) -> int:
    """POST /repos/{repo}/issues/{number}/comments (a PR is an issue); returns the comment's id."""
    return int(_send(repo, "POST", f"/repos/{repo}/issues/{number}/comments", {"body": body})["id"])


def issue_comment_update(*, repo: str, comment_id: int, body: str) -> None:
    """PATCH /repos/{repo}/issues/comments/{comment_id}: the comment edited in place."""
    _send(repo, "PATCH", f"/repos/{repo}/issues/comments/{comment_id}", {"body": body})


def issue_create(*, repo: str, title: str, body: str) -> int:
    """POST /repos/{repo}/issues; returns the new issue's number."""
    return int(_send(repo, "POST", f"/repos/{repo}/issues", {"title": title, "body": body})["number"])


def issue_close(*, repo: str, number: int, body: str) -> None:
    """PATCH /repos/{repo}/issues/{number} to closed, with its body brought up to date."""
    _send(
        repo, "PATCH", f"/repos/{repo}/issues/{number}", {"state": "closed", "state_reason": "completed", "body": body}
    )


def _calling(repo: str, what: str, call: Any) -> Any:
    """Run a PyGithub ``call``; its exceptions become ours (``GitHubError``/``RateLimited``)."""
    try:
        return call()
    except GithubException as e:
        if e.status in (401, 404):
            tokens_forget(repo=repo)
        raise _error(e.status, e.headers or {}, e.data, what) from e
    except requests.RequestException as e:
        raise GitHubError(f"GitHub unreachable for {repo}: {e}", retryable=True) from e


def _app_id(check_run: dict[str, Any]) -> str:
    return str((check_run.get("app") or {}).get("id") or "")


# --- Actions artifacts (test reports) ----------------------------------------------------------


def run_artifacts(*, repo: str, run_id: int) -> list[dict[str, Any]]:
    """GET /repos/{repo}/actions/runs/{run_id}/artifacts: ``{"id", "name", "size_in_bytes", "expired"}`` of each
    artifact of that run, pages of 100."""
    path = f"/repos/{repo}/actions/runs/{run_id}/artifacts"
    return [
        {
            "id": int(item["id"]),
            "name": str(item.get("name") or ""),
            "size_in_bytes": int(item.get("size_in_bytes") or 0),
            "expired": bool(item.get("expired")),
        }
        for item in _listing(repo=repo, path=path, key="artifacts")
        if isinstance(item, dict) and str(item.get("id", "")).isdigit()
    ]


def artifact_download(*, repo: str, artifact_id: int, into: BinaryIO, max_bytes: int) -> int:
    """GET /repos/{repo}/actions/artifacts/{id}/zip into ``into``; returns the bytes written.

    GitHub answers 302 to a short-lived storage URL, which is fetched WITHOUT our Authorization header (the
    installation token must not leave GitHub's API). More than ``max_bytes`` raises ``TooLarge``.
    """
    path = f"/repos/{repo}/actions/artifacts/{artifact_id}/zip"
    headers = {"Authorization": f"token {installation_token(repo=repo)}", "Accept": "application/vnd.github+json"}
    timeout = settings.GITHUB_TIMEOUT_SECONDS
    try:
        answer = requests.get(settings.GITHUB_API_URL + path, headers=headers, allow_redirects=False, timeout=timeout)
        if answer.status_code in (301, 302, 303, 307, 308) and answer.headers.get("Location"):
            location = answer.headers["Location"]
            answer = requests.get(location, stream=True, allow_redirects=False, timeout=timeout)
        if answer.status_code != 200:
            if answer.status_code in (401, 404):
                tokens_forget(repo=repo)
            raise _error(answer.status_code, dict(answer.headers), _json(answer.text[:2000]), f"GET {path}")
        written = 0
        for chunk in answer.iter_content(1024 * 1024):
            written += len(chunk)
            if written > max_bytes:
                raise TooLarge(f"artifact {artifact_id} of {repo} is over {max_bytes} bytes")
            into.write(chunk)
        return written
    except requests.RequestException as e:
        what = f"downloading artifact {artifact_id} of {repo}"
        raise GitHubError(f"GitHub unreachable {what}: {e}", retryable=True) from e


class TooLarge(GitHubError):
    pass


# --- job logs --------------------------------------------------------------------------------------------------------


def workflow_run_attempt_jobs(*, repo: str, run_id: str, attempt: int) -> list[dict[str, Any]]:
    """GET /repos/{repo}/actions/runs/{run_id}/attempts/{attempt}/jobs, every page: each job as
    ``{"id", "name", "conclusion", "steps": [{"name", "number", "conclusion"}]}``."""
    client = installation_client(repo=repo)
    path = f"/repos/{repo}/actions/runs/{run_id}/attempts/{attempt}/jobs"
    jobs: list[dict[str, Any]] = []
    page = 1
    while True:
        query = {"per_page": 100, "page": page}
        data = _calling(
            repo, f"GET {path}", lambda q=query: client.requester.requestJsonAndCheck("GET", path, parameters=q)[1]
        )
        batch = data.get("jobs") or []
        jobs += [
            {
                "id": job.get("id"),
                "name": job.get("name") or "",
                "conclusion": job.get("conclusion") or "",
                "steps": [
                    {"name": s.get("name") or "", "number": s.get("number"), "conclusion": s.get("conclusion") or ""}
                    for s in job.get("steps") or []
                ],
            }
            for job in batch
        ]
        if len(batch) < 100 or len(jobs) >= int(data.get("total_count") or 0):
            return jobs
        page += 1


def job_log_open(*, repo: str, job_id: int) -> requests.Response:
    """GET /repos/{repo}/actions/jobs/{job_id}/logs as a stream (close it when done).

    GitHub answers with a 302 to a short-lived storage URL. The redirect is followed by hand, without our
    Authorization header: the installation token must never reach a host that is not GitHub's API.
    """
    headers = {"Authorization": f"Bearer {installation_token(repo=repo)}", "Accept": "application/vnd.github+json"}
    url = f"{settings.GITHUB_API_URL}/repos/{repo}/actions/jobs/{job_id}/logs"
    timeout = settings.GITHUB_TIMEOUT_SECONDS
    try:
        answer = requests.get(url, headers=headers, allow_redirects=False, timeout=timeout)
        if answer.status_code in (301, 302, 303, 307, 308) and answer.headers.get("Location"):
            answer = requests.get(answer.headers["Location"], stream=True, timeout=timeout)
    except requests.RequestException as e:
        raise GitHubError(f"GitHub unreachable fetching the log of job {job_id} of {repo}: {e}", retryable=True) from e
    if answer.status_code != 200:
        if answer.status_code in (401, 404):
            tokens_forget(repo=repo)
        data = _json(answer.text[:2000])
        answer.close()
        raise _error(answer.status_code, dict(answer.headers), data, f"GET /repos/{repo}/actions/jobs/{job_id}/logs")
    return answer
