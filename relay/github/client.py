"""GitHub API client: the calls the relay makes (PyGithub is used only in ``relay.github``).

Every call is made as the App's installation on the repository (``relay.github.app``: tokens, and the two
exceptions callers see, ``GitHubError`` and ``RateLimited``).

PyGithub's own retry and throttling are switched off on purpose: the dispatch service owns the retry
policy (so that every try is counted on the Dispatch row), and concurrency is bounded by the
dispatch thread pool rather than by PyGithub's per-client sleeps (0.25 s per request, 1 s per write
by default), which would make a fan-out to 100 backends take minutes.
"""

import threading
from typing import Any, BinaryIO

import requests
from django.conf import settings

from relay.github.app import (
    RUN_MISSING,
    TOKEN_SUSPECT,
    GitHubError,
    calling,
    error_from,
    github_reachable,
    installation_client,
    installation_request,
    installation_token,
    json_or_text,
    rate_limit_wait,
    tokens_forget,
)
from relay.github.app import RateLimited as RateLimited  # callers catch both from here

__all__ = ["github_reachable"]  # the App's own call, from relay.github.app

_local = threading.local()


def _http() -> requests.Session:
    """The thread's session for the downloads made without PyGithub (logs, artifacts, each a GET to the API and one
    to its storage): connections kept alive from one job's downloads to the next, where ``requests.get`` opened two
    (two TLS handshakes against GitHub) and built a session per call."""
    session = getattr(_local, "session", None)
    if session is None:
        session = _local.session = requests.Session()
    return session


def repository_dispatch_create(*, repo: str, event_type: str, client_payload: dict[str, Any]) -> None:
    """POST /repos/{repo}/dispatches as the App's installation on ``repo``; any non-2xx raises."""
    body = {"event_type": event_type, "client_payload": client_payload}
    status, headers, text = installation_request("POST", f"/repos/{repo}/dispatches", repo=repo, body=body)
    if not 200 <= status < 300:
        if status in (401, 404):
            # The token may have been revoked or the App reinstalled: resolve both again next time.
            tokens_forget(repo=repo)
        raise error_from(status, headers, json_or_text(text), f"POST /repos/{repo}/dispatches")


def commit_exists(*, repo: str, sha: str) -> bool:
    """Whether ``sha`` is a commit of ``repo`` (GET /repos/{repo}/commits/{sha} as the App, asking for the SHA alone
    rather than the commit's diff): False when GitHub answers 422 or 404 (no such commit); GitHubError when it cannot
    say (unreachable, 5xx, a rate limit, the App not installed there)."""
    client = installation_client(repo=repo)
    path = f"/repos/{repo}/commits/{sha}"
    try:
        status, headers, text = client.requester.requestJson(
            "GET", path, headers={"Accept": "application/vnd.github.sha"}
        )
    except requests.RequestException as e:
        raise GitHubError(f"GitHub unreachable for {repo}: {e}", retryable=True) from e
    if status == 200:
        return True
    if status in (404, 422) and rate_limit_wait(status, headers, "") is None:
        return False
    raise error_from(status, headers, json_or_text(text), f"GET {path}")


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
    return calling(repo, what, lambda: client.get_repo(repo).create_check_run(**fields).id)


def check_run_update(*, repo: str, check_run_id: int, fields: dict[str, Any]) -> None:
    """PATCH /repos/{repo}/check-runs/{id} with ``fields`` (as for ``check_run_create``, name and head_sha aside)."""
    client = installation_client(repo=repo)
    what = f"PATCH /repos/{repo}/check-runs/{check_run_id}"
    # The client is lazy (_client_options): neither the repo nor the check run is fetched before the PATCH.
    calling(repo, what, lambda: client.get_repo(repo).get_check_run(check_run_id).edit(**fields))


def check_run_find(*, repo: str, head_sha: str, name: str) -> int | None:
    """Our App's latest check run called ``name`` on commit ``head_sha``, or None.

    Used before creating a check run again after a failed try: GitHub may have created it and failed to say so.
    """
    client = installation_client(repo=repo)
    query = {"check_name": name, "app_id": str(settings.GITHUB_APP_ID), "filter": "latest", "per_page": 100}
    path = f"/repos/{repo}/commits/{head_sha}/check-runs"
    data = calling(repo, f"GET {path}", lambda: client.requester.requestJsonAndCheck("GET", path, parameters=query)[1])
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


def _listing(*, repo: str, path: str, key: str, forget_on: tuple[int, ...] = TOKEN_SUSPECT) -> list[Any]:
    """Every item under ``key`` of a paged GET listing: pages of 100 until a short page or ``total_count``."""
    client = installation_client(repo=repo)
    items: list[Any] = []
    page = 1
    while True:
        query = {"per_page": 100, "page": page}
        data = calling(
            repo,
            f"GET {path}",
            lambda q=query: client.requester.requestJsonAndCheck("GET", path, parameters=q)[1],
            forget_on=forget_on,
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
    data = json_or_text(text)
    message = data.get("message", "") if isinstance(data, dict) else str(data)
    if status == 403 and ALREADY_RUNNING in message.lower():
        return False
    if status in (401, 404):
        tokens_forget(repo=repo)
    raise error_from(status, headers, data, f"POST {path}")


# --- issues and PR comments (on-call notifications, relay.alerts.notify)
# ----------------------------------------------------


def _send(repo: str, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    client = installation_client(repo=repo)
    return calling(repo, f"{method} {path}", lambda: client.requester.requestJsonAndCheck(method, path, input=body)[1])


def issue_comment_create(*, repo: str, number: int, body: str) -> int:
    """POST /repos/{repo}/issues/{number}/comments (a PR is an issue); returns the comment's id."""
    return int(_send(repo, "POST", f"/repos/{repo}/issues/{number}/comments", {"body": body})["id"])


def issue_comment_find(*, repo: str, number: int, marker: str) -> tuple[int, str] | None:
    """The first comment on issue/PR ``number`` whose body holds ``marker`` (id, body), or None: GET
    /repos/{repo}/issues/{number}/comments, pages of 100. A retry after a crash edits the comment it finds."""
    client = installation_client(repo=repo)
    path = f"/repos/{repo}/issues/{number}/comments"
    page = 1
    while True:
        query = {"per_page": 100, "page": page}
        batch = calling(
            repo, f"GET {path}", lambda q=query: client.requester.requestJsonAndCheck("GET", path, parameters=q)[1]
        )
        for comment in batch or []:
            if marker in (comment.get("body") or ""):
                return int(comment["id"]), comment["body"]
        if len(batch or []) < 100:
            return None
        page += 1


def issue_comment_update(*, repo: str, comment_id: int, body: str) -> None:
    """PATCH /repos/{repo}/issues/comments/{comment_id}: the comment edited in place."""
    _send(repo, "PATCH", f"/repos/{repo}/issues/comments/{comment_id}", {"body": body})


def issue_create(*, repo: str, title: str, body: str) -> int:
    """POST /repos/{repo}/issues; returns the new issue's number."""
    return int(_send(repo, "POST", f"/repos/{repo}/issues", {"title": title, "body": body})["number"])


def issue_find(*, repo: str, marker: str, pages: int = 10) -> int | None:
    """The number of the newest issue of ``repo`` (open or closed) whose body holds ``marker``, or None: GET
    /repos/{repo}/issues?state=all, at most ``pages`` pages of 100. A retry after a crash edits the issue it finds."""
    client = installation_client(repo=repo)
    path = f"/repos/{repo}/issues"
    for page in range(1, pages + 1):
        query = {"state": "all", "per_page": 100, "page": page}
        batch = calling(
            repo, f"GET {path}", lambda q=query: client.requester.requestJsonAndCheck("GET", path, parameters=q)[1]
        )
        for issue in batch or []:
            if marker in (issue.get("body") or ""):
                return int(issue["number"])
        if len(batch or []) < 100:
            return None
    return None


def issue_update(*, repo: str, number: int, body: str) -> None:
    """PATCH /repos/{repo}/issues/{number}: its body edited in place."""
    _send(repo, "PATCH", f"/repos/{repo}/issues/{number}", {"body": body})


def issue_close(*, repo: str, number: int, body: str) -> None:
    """PATCH /repos/{repo}/issues/{number} to closed, with its body brought up to date."""
    _send(
        repo, "PATCH", f"/repos/{repo}/issues/{number}", {"state": "closed", "state_reason": "completed", "body": body}
    )


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
        for item in _listing(repo=repo, path=path, key="artifacts", forget_on=RUN_MISSING)
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
        answer = _http().get(settings.GITHUB_API_URL + path, headers=headers, allow_redirects=False, timeout=timeout)
        if answer.status_code in (301, 302, 303, 307, 308) and answer.headers.get("Location"):
            location = answer.headers["Location"]
            answer = _http().get(location, stream=True, allow_redirects=False, timeout=timeout)
        with answer:  # closed however it ends: its connection goes back to the session's pool, or away
            if answer.status_code != 200:
                if answer.status_code in (401, 404):
                    tokens_forget(repo=repo)
                data = json_or_text(answer.text[:2000])
                raise error_from(answer.status_code, dict(answer.headers), data, f"GET {path}")
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
    ``{"id", "name", "conclusion", "runner_name", "labels",
    "steps": [{"name", "number", "conclusion", "started_at", "completed_at"}]}``."""
    client = installation_client(repo=repo)
    path = f"/repos/{repo}/actions/runs/{run_id}/attempts/{attempt}/jobs"
    jobs: list[dict[str, Any]] = []
    page = 1
    while True:
        query = {"per_page": 100, "page": page}
        data = calling(
            repo,
            f"GET {path}",
            lambda q=query: client.requester.requestJsonAndCheck("GET", path, parameters=q)[1],
            forget_on=RUN_MISSING,  # a run (or attempt) that is not there
        )
        batch = data.get("jobs") or []
        jobs += [
            {
                "id": job.get("id"),
                "name": job.get("name") or "",
                "conclusion": job.get("conclusion") or "",
                "runner_name": job.get("runner_name") or "",
                "labels": [label for label in job.get("labels") or [] if isinstance(label, str)],
                "steps": [
                    {
                        "name": s.get("name") or "",
                        "number": s.get("number"),
                        "conclusion": s.get("conclusion") or "",
                        "started_at": s.get("started_at") or "",
                        "completed_at": s.get("completed_at") or "",
                    }
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
        answer = _http().get(url, headers=headers, allow_redirects=False, timeout=timeout)
        if answer.status_code in (301, 302, 303, 307, 308) and answer.headers.get("Location"):
            answer = _http().get(answer.headers["Location"], stream=True, timeout=timeout)
    except requests.RequestException as e:
        raise GitHubError(f"GitHub unreachable fetching the log of job {job_id} of {repo}: {e}", retryable=True) from e
    if answer.status_code != 200:
        if answer.status_code in RUN_MISSING:  # a 404: no such job, or its log expired
            tokens_forget(repo=repo)
        data = json_or_text(answer.text[:2000])
        answer.close()
        raise error_from(
            answer.status_code, dict(answer.headers), data, f"GET /repos/{repo}/actions/jobs/{job_id}/logs"
        )
    return answer
