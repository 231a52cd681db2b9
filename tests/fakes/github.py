"""A fake GitHub REST API over real HTTP, for PyGithub to talk to.

It plays the GitHub App flow (App JWT → repository installation → installation token, checked on
every call), repository lookups, ``repository_dispatch``, check runs (create, update, list a suite's or a
commit's) and workflow re-runs, enforcing GitHub's rules where our code depends on them (64 KB
client_payload, 10 top-level keys, token expiry, a completed check run keeps its conclusion, a run
re-runs once at a time). Tests program it:

    fake.script("POST", "/repos/org/a/dispatches", Reply(500), Reply(500))   # the next two answers
    fake.latency = 0.1                                                       # every answer, seconds
    fake.outage = Reply(502)                                                 # every answer until None
    fake.route("GET", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/check-runs")(handler)   # extend

and read what it was sent from ``fake.requests`` (every request, in order, thread-safe). It speaks HTTP/1.1 with
keep-alive, as GitHub does (``fake.connections_opened`` counts the connections); ``stop()`` ends the open ones too.
"""

import contextlib
import json
import re
import secrets
import socket
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

REPO = r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)"
# How often a fake server looks for its shutdown: socketserver's default (0.5 s) made every stop, so every test
# using a fake, wait up to half a second.
POLL = 0.02
CLIENT_PAYLOAD_LIMIT = 65_536  # GitHub: "The total size of the JSON payload must be less than 64KB."


@dataclass(frozen=True)
class AppKey:
    private_pem: str
    public_pem: bytes


def app_key_generate() -> AppKey:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = serialization.Encoding.PEM
    private = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    public = key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo)
    return AppKey(private.decode(), public)


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0

    @classmethod
    def rate_limited(cls, *, reset_in: float = 1.0, status: int = 403) -> "Reply":
        """A primary rate limit as GitHub answers it: remaining 0 and the reset time (epoch seconds)."""
        headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(time.time() + reset_in))}
        return cls(status, {"message": "API rate limit exceeded for installation ID 1."}, headers)

    @classmethod
    def retry_after(cls, seconds: int, *, status: int = 429) -> "Reply":
        """A secondary rate limit: Retry-After in seconds."""
        return cls(status, {"message": "You have exceeded a secondary rate limit."}, {"retry-after": str(seconds)})


@dataclass
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic() when it arrived
    status: int = 0
    answered: float = 0.0  # time.monotonic() when its answer was written

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


Handler = Callable[["FakeGitHub", Request, re.Match], Reply]


class FakeGitHub:
    def __init__(self, *, app_id: int, public_pem: bytes) -> None:
        self.app_id = app_id
        self.public_key = serialization.load_pem_public_key(public_pem)
        self.latency = 0.0
        self.outage: Reply | None = None  # while set, every request is answered with it (GitHub is down)
        self.token_ttl = timedelta(hours=1)
        self.uninstalled: set[str] = set()  # repos (lower case) the App is not installed on
        self.requests: list[Request] = []
        self.connections_opened = 0  # TCP connections accepted: with keep-alive, fewer than requests
        self.tokens: dict[str, tuple[int, datetime]] = {}
        self._routes: list[tuple[str, re.Pattern, Handler]] = []
        self._scripts: dict[tuple[str, str], deque[Reply]] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.route("GET", REPO + r"/installation")(_repo_installation)
        self.route("POST", r"/app/installations/(?P<id>\d+)/access_tokens")(_access_token)
        self.route("GET", REPO)(_repo)
        self.route("POST", REPO + r"/dispatches")(_dispatch)
        # Checks and Actions re-runs: check runs live in ``check_runs`` (id → the run as GitHub shows it).
        self.check_runs: dict[int, dict[str, Any]] = {}
        self.rerunning: set[tuple[str, int]] = set()  # (repo, run id) re-running: a second re-run gets a 403
        self.route("POST", REPO + r"/check-runs")(_check_run_create)
        self.route("PATCH", REPO + r"/check-runs/(?P<id>\d+)")(_check_run_update)
        self.route("GET", REPO + r"/check-suites/(?P<id>\d+)/check-runs")(_check_suite_check_runs)
        self.route("GET", REPO + r"/commits/(?P<sha>[0-9a-fA-F]{7,40})/check-runs")(_commit_check_runs)
        # Commits: "owner/repo" (lower case) → the full SHAs GitHub knows there; any other is answered 422.
        self.commits: dict[str, set[str]] = {}
        self.route("GET", REPO + r"/commits/(?P<sha>[^/]+)")(_commit)
        # Upstream history for the compare API: "owner/repo" (lower case) → commits oldest first, each
        # {"sha", "message", "files": [paths], "pulls": [{"number", "title"}]} (commit_add); a commit's PRs at
        # /commits/{sha}/pulls, merged.
        self.history: dict[str, list[dict[str, Any]]] = {}
        self.route("GET", REPO + r"/compare/(?P<base>[0-9a-fA-F]+)\.\.\.(?P<head>[0-9a-fA-F]+)")(_compare)
        self.route("GET", REPO + r"/commits/(?P<sha>[0-9a-fA-F]+)/pulls")(_commit_pulls)
        self.route("POST", REPO + r"/actions/runs/(?P<id>\d+)/rerun-failed-jobs")(_rerun_failed_jobs)
        # Actions artifacts: (repo lower case, run id) → artifacts as GitHub lists them, each with its zip's bytes;
        # the zip is served by a 302 to a storage URL that refuses an Authorization header (as GitHub's blob store).
        self.artifacts: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.route("GET", REPO + r"/actions/runs/(?P<id>\d+)/artifacts")(_run_artifacts)
        self.route("GET", REPO + r"/actions/artifacts/(?P<id>\d+)/zip")(_artifact_zip)
        self.route("GET", r"/storage/artifacts/(?P<id>\d+)")(_artifact_storage)
        # Actions jobs and their logs: ``actions_jobs[(repo, run id, attempt)]`` lists the jobs as GitHub shows them,
        # ``job_logs[job id]`` holds each log's bytes, served by a 302 to /storage/ as GitHub does.
        self.actions_jobs: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
        self.job_logs: dict[int, bytes] = {}
        self.route("GET", REPO + r"/actions/runs/(?P<id>\d+)/attempts/(?P<attempt>\d+)/jobs")(_attempt_jobs)
        self.route("GET", REPO + r"/actions/jobs/(?P<id>\d+)/logs")(_job_log_redirect)
        self.route("GET", r"/storage/job-logs/(?P<id>\d+)")(_job_log_blob)
        # Issues and issue (PR) comments: ``issues`` keyed by (repo, number), ``comments`` by id.
        self.issues: dict[tuple[str, int], dict[str, Any]] = {}
        self.comments: dict[int, dict[str, Any]] = {}
        # Comments created but answered 502, as if GitHub wrote and the answer was lost (or the caller died after).
        self.comment_answers_lost = 0
        self.issue_answers_lost = 0  # the same for issues
        self.comment_answer_delay = 0.0  # seconds a comment's answer waits after GitHub wrote it (a worker to kill)
        self.issue_answer_delay = 0.0  # the same for an opened issue
        self.answers_held = 0  # writes done whose answer is still held back (a kill now loses the answer)
        self.route("POST", REPO + r"/issues/(?P<number>\d+)/comments")(_comment_create)
        self.route("GET", REPO + r"/issues/(?P<number>\d+)/comments")(_comments_list)
        self.route("PATCH", REPO + r"/issues/comments/(?P<id>\d+)")(_comment_update)
        self.route("POST", REPO + r"/issues")(_issue_create)
        self.route("GET", REPO + r"/issues")(_issues_list)
        self.route("PATCH", REPO + r"/issues/(?P<number>\d+)")(_issue_update)

    # --- programming ----------------------------------------------------------------------------

    def route(self, method: str, pattern: str) -> Callable[[Handler], Handler]:
        """Register ``handler(fake, request, match) -> Reply`` for a method and a full-path regex."""

        def register(handler: Handler) -> Handler:
            self._routes.append((method, re.compile(pattern + r"/?$"), handler))
            return handler

        return register

    def script(self, method: str, path: str, *replies: Reply) -> None:
        """Answer the next requests to exactly ``method path`` with ``replies``, then as usual."""
        with self._lock:
            self._scripts.setdefault((method, path), deque()).extend(replies)

    def artifact_add(self, repo: str, run_id: int, *, name: str, data: bytes) -> int:
        """An artifact of a workflow run, as ``actions/upload-artifact`` would leave it; returns its id."""
        with self._lock:
            artifact_id = 9_000_000 + sum(len(v) for v in self.artifacts.values()) + 1
            self.artifacts.setdefault((repo.lower(), run_id), []).append(
                {"id": artifact_id, "name": name, "data": data, "repo": repo.lower(), "run_id": run_id}
            )
        return artifact_id

    def _artifact(self, artifact_id: int) -> dict[str, Any] | None:
        with self._lock:
            found = [a for items in self.artifacts.values() for a in items if a["id"] == artifact_id]
        return found[0] if found else None

    # --- reading --------------------------------------------------------------------------------

    def commit_add(self, repo: str, sha: str, *, files=(), pr: int | None = None, title: str = "") -> dict[str, Any]:
        """A commit of ``repo``'s history (after those added before), merged by PR ``pr`` when given."""
        commit = {"sha": sha, "message": title or f"commit {sha[:7]}", "files": list(files), "pulls": []}
        if pr is not None:
            commit["pulls"] = [{"number": pr, "title": title or f"PR {pr}"}]
        with self._lock:
            self.history.setdefault(repo.lower(), []).append(commit)
            self.commits.setdefault(repo.lower(), set()).add(sha)
            self._history_index = None
        return commit

    def _history_find(self, repo: str, sha: str) -> tuple[list[dict[str, Any]], int | None]:
        commits = self.history.get(repo, [])
        index = getattr(self, "_history_index", None)
        if index is None or index[0] is not commits or len(index[1]) != len(commits):
            index = (commits, {c["sha"]: i for i, c in enumerate(commits)})
            self._history_index = index
        return commits, index[1].get(sha)

    def requests_to(self, method: str, pattern: str) -> list[Request]:
        regex = re.compile(pattern + r"$")
        with self._lock:
            return [r for r in self.requests if r.method == method and regex.match(r.path)]

    def dispatches(self, *, status: int = 204) -> list[Request]:
        """The repository_dispatch requests answered with ``status``."""
        return [r for r in self.requests_to("POST", REPO + "/dispatches") if r.status == status]

    def check_run_add(self, repo: str, *, name: str, head_sha: str, app_id: int | None = None, **fields) -> dict:
        """A check run already on a commit (another App's when ``app_id`` says so), as if it had been created."""
        return self._check_run_store(repo, app_id or self.app_id, {"name": name, "head_sha": head_sha, **fields})

    def check_suite_id(self, repo: str, head_sha: str, app_id: int | None = None) -> int:
        """GitHub makes one check suite per App and commit; the fake numbers them from those."""
        return 1 + zlib.crc32(f"{repo.lower()}:{head_sha}:{app_id or self.app_id}".encode())

    def _check_run_store(self, repo: str, app_id: int, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            check_run_id = 7_000_000 + len(self.check_runs) + 1
            run = {
                "id": check_run_id,
                "name": body["name"],
                "head_sha": body["head_sha"],
                "status": body.get("status") or ("completed" if body.get("conclusion") else "queued"),
                "conclusion": body.get("conclusion"),
                "external_id": body.get("external_id") or "",
                "details_url": body.get("details_url"),
                "started_at": body.get("started_at"),
                "completed_at": body.get("completed_at"),
                "output": body.get("output") or {},
                "app": {"id": app_id},
                "check_suite": {"id": self.check_suite_id(repo, body["head_sha"], app_id)},
                "repo": repo.lower(),
            }
            self.check_runs[check_run_id] = run
        return run

    def _check_run_json(self, run: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.url}/repos/{run['repo']}/check-runs/{run['id']}"
        shown = {k: v for k, v in run.items() if k != "repo"}
        return {**shown, "url": url, "html_url": f"https://github.com/{run['repo']}/runs/{run['id']}"}

    # --- auth helpers for handlers --------------------------------------------------------------

    def app_jwt_valid(self, request: Request) -> bool:
        token = _bearer(request)
        try:
            claims = jwt.decode(token, self.public_key, algorithms=["RS256"])
        except jwt.PyJWTError:
            return False
        return str(claims.get("iss")) == str(self.app_id)

    def installation_of(self, request: Request) -> int | None:
        """The installation whose live token authenticates ``request``, or None."""
        with self._lock:
            grant = self.tokens.get(_bearer(request))
        if grant is None or grant[1] <= datetime.now(UTC):
            return None
        return grant[0]

    def installation_id(self, owner: str) -> int:
        # GitHub installs an App per account: every repo of one owner shares an installation.
        return 1000 + int.from_bytes(owner.lower().encode()[:6].ljust(6, b"\0"), "big") % 1_000_000

    # --- serving --------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the fake first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeGitHub":
        handler = type("Handler", (_HTTPHandler,), {"fake": self})
        server = _Server(("127.0.0.1", 0), handler)
        self._server = server
        threading.Thread(target=server.serve_forever, args=(POLL,), name="fake-github", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server.connections_close()

    def _answer(self, request: Request) -> Reply:
        if self.outage is not None:
            return self.outage
        with self._lock:
            queue = self._scripts.get((request.method, request.path))
            scripted = queue.popleft() if queue else None
        if scripted is not None:
            return scripted
        for method, regex, handler in self._routes:
            match = regex.match(request.path)
            if method == request.method and match:
                return handler(self, request, match)
        return Reply(404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})


class _Server(ThreadingHTTPServer):
    # The listen backlog. A fan-out to 100 backends opens about 100 connections at once; with socketserver's
    # default of 5 the kernel drops the SYNs past the backlog and each costs a 1 s retransmit, which a benchmark
    # would measure as the relay's latency.
    request_queue_size = 256
    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()

    def connections_close(self) -> None:
        """End the kept-alive connections too: a stopped GitHub must be unreachable on them as on new ones."""
        with self.connections_lock:
            for conn in self.connections:
                with contextlib.suppress(OSError):  # closed already
                    conn.shutdown(socket.SHUT_RDWR)


class _HTTPHandler(BaseHTTPRequestHandler):
    # HTTP/1.1 with keep-alive, as GitHub: a client that keeps its connections open pays for a connect once.
    protocol_version = "HTTP/1.1"
    fake: FakeGitHub

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)
            self.fake.connections_opened += 1

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        super().finish()

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        parts = urlsplit(self.path)
        request = Request(
            self.command,
            parts.path,
            parts.query,
            {k.lower(): v for k, v in self.headers.items()},
            self.rfile.read(length),
            time.monotonic(),
        )
        reply = self.fake._answer(request)
        time.sleep(self.fake.latency + reply.delay)
        request.status = reply.status
        raw = isinstance(reply.body, bytes)  # a file (an artifact's zip, a log), not JSON
        payload = reply.body if raw else b"" if reply.body is None else json.dumps(reply.body).encode()
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/octet-stream" if raw else "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(payload)))
        request.answered = time.monotonic()
        with self.fake._lock:
            self.fake.requests.append(request)
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _bearer(request: Request) -> str:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value if scheme.lower() in ("bearer", "token") else ""


def _unauthorized() -> Reply:
    return Reply(401, {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"})


def _repo_installation(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if not fake.app_jwt_valid(request):
        return Reply(401, {"message": "A JSON web token could not be decoded"})
    if f"{m['owner']}/{m['repo']}".lower() in fake.uninstalled:
        return Reply(404, {"message": "Not Found"})
    installation_id = fake.installation_id(m["owner"])
    return Reply(
        200,
        {
            "id": installation_id,
            "app_id": fake.app_id,
            "account": {"login": m["owner"], "type": "Organization"},
            "target_type": "Organization",
            "access_tokens_url": f"{fake.url}/app/installations/{installation_id}/access_tokens",
        },
    )


def _access_token(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if not fake.app_jwt_valid(request):
        return Reply(401, {"message": "A JSON web token could not be decoded"})
    token = "ghs_" + secrets.token_hex(16)
    expires_at = datetime.now(UTC) + fake.token_ttl
    with fake._lock:
        fake.tokens[token] = (int(m["id"]), expires_at)
    return Reply(201, {"token": token, "expires_at": expires_at.strftime("%Y-%m-%dT%H:%M:%SZ"), "permissions": {}})


def _repo(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if fake.installation_of(request) != fake.installation_id(m["owner"]):
        return _unauthorized()
    full_name = f"{m['owner']}/{m['repo']}"
    return Reply(
        200,
        {
            "id": abs(hash(full_name)) % 10**9,
            "name": m["repo"],
            "full_name": full_name,
            "owner": {"login": m["owner"], "url": f"{fake.url}/users/{m['owner']}"},
            "url": f"{fake.url}/repos/{full_name}",
            "default_branch": "main",
        },
    )


def _dispatch(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if fake.installation_of(request) != fake.installation_id(m["owner"]):
        return _unauthorized()
    body = request.json or {}
    client_payload = body.get("client_payload", {})
    if not isinstance(body.get("event_type"), str) or not 0 < len(body["event_type"]) <= 100:
        return Reply(422, {"message": "Invalid request.\n\nevent_type is missing or too long."})
    if not isinstance(client_payload, dict) or len(client_payload) > 10:
        return Reply(422, {"message": "Invalid request.\n\nclient_payload must have at most 10 properties."})
    if len(json.dumps(client_payload).encode()) >= CLIENT_PAYLOAD_LIMIT:
        return Reply(422, {"message": "Invalid request.\n\nclient_payload is too large."})
    return Reply(204)


CHECK_RUN_STATUSES = ("queued", "in_progress", "completed")


def _installed_on(fake: FakeGitHub, request: Request, m: re.Match) -> bool:
    return fake.installation_of(request) == fake.installation_id(m["owner"])


def _check_run_create(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if not _installed_on(fake, request, m):
        return _unauthorized()
    body = request.json or {}
    if not isinstance(body.get("name"), str) or not body["name"] or not isinstance(body.get("head_sha"), str):
        return Reply(422, {"message": "Invalid request.\n\nname and head_sha are required."})
    if problem := _check_run_problem(body):
        return problem
    run = fake._check_run_store(f"{m['owner']}/{m['repo']}", fake.app_id, body)
    return Reply(201, fake._check_run_json(run))


def _check_run_update(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if not _installed_on(fake, request, m):
        return _unauthorized()
    body = request.json or {}
    with fake._lock:
        run = fake.check_runs.get(int(m["id"]))
    if run is None or run["repo"] != f"{m['owner']}/{m['repo']}".lower() or run["app"]["id"] != fake.app_id:
        return Reply(404, {"message": "Not Found"})
    if problem := _check_run_problem(body):
        return problem
    status = body.get("status") or ("completed" if body.get("conclusion") else run["status"])
    if run["status"] == "completed" and (status, body.get("conclusion", run["conclusion"])) != (
        "completed",
        run["conclusion"],
    ):
        # GitHub does not move a completed check run back or change its conclusion; a re-run needs a new one.
        return Reply(422, {"message": "Invalid request.\n\nThe check run is already completed."})
    with fake._lock:
        run.update({k: v for k, v in body.items() if k not in ("name", "head_sha")}, status=status)
    return Reply(200, fake._check_run_json(run))


def _check_run_problem(body: dict[str, Any]) -> Reply | None:
    status = body.get("status")
    if status is not None and status not in CHECK_RUN_STATUSES:
        return Reply(422, {"message": f"Invalid request.\n\n{status!r} is not a member of {CHECK_RUN_STATUSES}."})
    if status == "completed" and not body.get("conclusion"):
        return Reply(422, {"message": "Invalid request.\n\nconclusion is required when status is completed."})
    output = body.get("output")
    if output is not None and (not output.get("title") or not output.get("summary")):
        return Reply(422, {"message": "Invalid request.\n\noutput needs a title and a summary."})
    if output is not None and any(len(output.get(k) or "") > 65535 for k in ("summary", "text")):
        return Reply(422, {"message": "Invalid request.\n\noutput.summary and output.text are limited to 65535."})
    return None


def _check_runs_page(fake: FakeGitHub, request: Request, runs: list[dict[str, Any]]) -> Reply:
    query = {k: v[-1] for k, v in parse_qs(request.query).items()}
    if query.get("filter", "latest") == "latest":  # GitHub's default: the latest check run of each App and name
        latest: dict[tuple[int, str], dict[str, Any]] = {}
        for run in sorted(runs, key=lambda r: r["id"]):
            latest[(run["app"]["id"], run["name"])] = run
        runs = list(latest.values())
    if "check_name" in query:
        runs = [r for r in runs if r["name"] == query["check_name"]]
    if "app_id" in query:
        runs = [r for r in runs if str(r["app"]["id"]) == query["app_id"]]
    per_page = min(int(query.get("per_page", 30)), 100)
    page = int(query.get("page", 1))
    shown = runs[(page - 1) * per_page : page * per_page]
    return Reply(200, {"total_count": len(runs), "check_runs": [fake._check_run_json(r) for r in shown]})


def _check_suite_check_runs(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if not _installed_on(fake, request, m):
        return _unauthorized()
    repo = f"{m['owner']}/{m['repo']}".lower()
    with fake._lock:
        runs = [r for r in fake.check_runs.values() if r["repo"] == repo and r["check_suite"]["id"] == int(m["id"])]
    return _check_runs_page(fake, request, runs)


def _commit_check_runs(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if not _installed_on(fake, request, m):
        return _unauthorized()
    repo = f"{m['owner']}/{m['repo']}".lower()
    with fake._lock:
        runs = [r for r in fake.check_runs.values() if r["repo"] == repo and r["head_sha"] == m["sha"]]
    return _check_runs_page(fake, request, runs)


def _compare(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    """The commits after ``base`` up to ``head`` in the history, oldest first, a page at a time (GitHub: 250 without
    paging; ``total_commits`` always the whole count)."""
    if fake.installation_of(request) != fake.installation_id(m["owner"]):
        return _unauthorized()
    repo = f"{m['owner']}/{m['repo']}".lower()
    commits, base = fake._history_find(repo, m["base"])
    _, head = fake._history_find(repo, m["head"])
    if base is None or head is None:
        return Reply(404, {"message": "Not Found"})
    between = commits[base + 1 : head + 1]
    query = {k: v[-1] for k, v in parse_qs(request.query).items()}
    per_page, page = int(query.get("per_page", 250)), int(query.get("page", 1))
    shown = between[(page - 1) * per_page : page * per_page]
    listed = [{"sha": c["sha"], "commit": {"message": c["message"]}} for c in shown]
    return Reply(200, {"status": "ahead", "total_commits": len(between), "commits": listed, "files": []})


def _commit_pulls(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if fake.installation_of(request) != fake.installation_id(m["owner"]):
        return _unauthorized()
    commits, i = fake._history_find(f"{m['owner']}/{m['repo']}".lower(), m["sha"])
    if i is None:
        return Reply(422, {"message": f"No commit found for SHA: {m['sha']}"})
    return Reply(
        200,
        [
            {
                "number": p["number"],
                "title": p["title"],
                "state": "closed",
                "merged_at": "2026-03-01T00:00:00Z",
                "html_url": f"https://github.com/{m['owner']}/{m['repo']}/pull/{p['number']}",
            }
            for p in commits[i]["pulls"]
        ],
    )


def _commit(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    """GET a commit; with ``Accept: application/vnd.github.sha`` GitHub answers the SHA alone, as text."""
    if fake.installation_of(request) != fake.installation_id(m["owner"]):
        return _unauthorized()
    commits, i = fake._history_find(f"{m['owner']}/{m['repo']}".lower(), m["sha"])
    if i is not None and "vnd.github.sha" not in request.headers.get("accept", ""):
        c = commits[i]
        return Reply(
            200, {"sha": c["sha"], "commit": {"message": c["message"]}, "files": [{"filename": f} for f in c["files"]]}
        )
    known = fake.commits.get(f"{m['owner']}/{m['repo']}".lower(), set())
    sha = next((s for s in known if s.startswith(m["sha"].lower()) and len(m["sha"]) >= 7), None)
    if sha is None:
        return Reply(422, {"message": f"No commit found for SHA: {m['sha']}", "status": "422"})
    if "vnd.github.sha" in request.headers.get("accept", ""):
        return Reply(200, sha.encode())
    return Reply(200, {"sha": sha, "commit": {"message": "a commit"}, "files": []})


def _rerun_failed_jobs(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if not _installed_on(fake, request, m):
        return _unauthorized()
    key = (f"{m['owner']}/{m['repo']}".lower(), int(m["id"]))
    with fake._lock:
        running = key in fake.rerunning
        fake.rerunning.add(key)
    if running:
        return Reply(
            403, {"message": "This workflow is already running", "documentation_url": "https://docs.github.com/rest"}
        )
    return Reply(201, {})


def _artifact_json(fake: FakeGitHub, artifact: dict[str, Any]) -> dict[str, Any]:
    base = f"{fake.url}/repos/{artifact['repo']}/actions/artifacts/{artifact['id']}"
    return {
        "id": artifact["id"],
        "name": artifact["name"],
        "size_in_bytes": len(artifact["data"]),
        "url": base,
        "archive_download_url": base + "/zip",
        "expired": False,
        "workflow_run": {"id": artifact["run_id"]},
    }


def _run_artifacts(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if not _installed_on(fake, request, m):
        return _unauthorized()
    with fake._lock:
        items = list(fake.artifacts.get((f"{m['owner']}/{m['repo']}".lower(), int(m["id"])), []))
    return Reply(200, {"total_count": len(items), "artifacts": [_artifact_json(fake, a) for a in items]})


def _artifact_zip(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if not _installed_on(fake, request, m):
        return _unauthorized()
    artifact = fake._artifact(int(m["id"]))
    if artifact is None or artifact["repo"] != f"{m['owner']}/{m['repo']}".lower():
        return Reply(404, {"message": "Not Found"})
    return Reply(302, None, {"Location": f"{fake.url}/storage/artifacts/{artifact['id']}?sig=signed"})


def _artifact_storage(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    # The blob store's URL is signed: a request that also carries a token is refused, as Azure does.
    if "authorization" in request.headers:
        return Reply(400, {"message": "Authorization header not allowed with a signed URL"})
    artifact = fake._artifact(int(m["id"]))
    return Reply(200, artifact["data"]) if artifact else Reply(404, {"message": "BlobNotFound"})


def _attempt_jobs(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if not _installed_on(fake, request, m):
        return _unauthorized()
    jobs = fake.actions_jobs.get((f"{m['owner']}/{m['repo']}".lower(), int(m["id"]), int(m["attempt"])))
    if jobs is None:
        return Reply(404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})
    page = int(parse_qs(request.query).get("page", ["1"])[0])
    per_page = int(parse_qs(request.query).get("per_page", ["30"])[0])
    shown = jobs[(page - 1) * per_page : page * per_page]
    return Reply(200, {"total_count": len(jobs), "jobs": shown})


def _job_log_redirect(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if not _installed_on(fake, request, m):
        return _unauthorized()
    if int(m["id"]) not in fake.job_logs:
        return Reply(404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})
    return Reply(302, None, {"Location": f"{fake.url}/storage/job-logs/{m['id']}?sig=signed"})


def _job_log_blob(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    # Storage refuses a request that carries an Authorization header, as Azure blob storage does with a GitHub token.
    if request.headers.get("authorization"):
        return Reply(400, {"message": "Authorization header not allowed with a signed URL"})
    return Reply(200, fake.job_logs[int(m["id"])])


# --- issues and comments ------------------------------------------------------------------------------------------


def _comment_create(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if not _installed_on(fake, request, m):
        return _unauthorized()
    body = request.json or {}
    if not isinstance(body.get("body"), str) or not body["body"]:
        return Reply(422, {"message": "Invalid request.\n\nbody is required."})
    repo = f"{m['owner']}/{m['repo']}".lower()
    with fake._lock:
        cid = 9000 + len(fake.comments) + 1
        fake.comments[cid] = {"id": cid, "repo": repo, "issue": int(m["number"]), "body": body["body"], "edits": 0}
        comment = dict(fake.comments[cid])
        delay = fake.comment_answer_delay
        if fake.comment_answers_lost > 0:
            fake.comment_answers_lost -= 1
            return Reply(502, {"message": "Server Error"})
    _answer_held(fake, delay)
    return Reply(201, comment | {"url": f"{fake.url}/repos/{repo}/issues/comments/{cid}"})


def _answer_held(fake: FakeGitHub, delay: float) -> None:
    """Written; the answer waits ``delay`` seconds before it is sent."""
    if delay <= 0:
        return
    with fake._lock:
        fake.answers_held += 1
    try:
        time.sleep(delay)
    finally:
        with fake._lock:
            fake.answers_held -= 1


def _comments_list(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    """The issue's comments, oldest first, a page of ``per_page`` (default 30) at a time."""
    if not _installed_on(fake, request, m):
        return _unauthorized()
    repo, number = f"{m['owner']}/{m['repo']}".lower(), int(m["number"])
    query = {k: v[-1] for k, v in parse_qs(request.query).items()}
    per_page, page = int(query.get("per_page", 30)), int(query.get("page", 1))
    with fake._lock:
        found = [dict(c) for c in sorted(fake.comments.values(), key=lambda c: c["id"])]
    found = [c for c in found if c["repo"] == repo and c["issue"] == number]
    shown = found[(page - 1) * per_page : page * per_page]
    return Reply(200, [c | {"url": f"{fake.url}/repos/{repo}/issues/comments/{c['id']}"} for c in shown])


def _comment_update(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if not _installed_on(fake, request, m):
        return _unauthorized()
    with fake._lock:
        comment = fake.comments.get(int(m["id"]))
        if comment is None or comment["repo"] != f"{m['owner']}/{m['repo']}".lower():
            return Reply(404, {"message": "Not Found"})
        comment.update(body=(request.json or {}).get("body", comment["body"]), edits=comment["edits"] + 1)
        return Reply(
            200, dict(comment) | {"url": f"{fake.url}/repos/{comment['repo']}/issues/comments/{comment['id']}"}
        )


def _issue_create(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if not _installed_on(fake, request, m):
        return _unauthorized()
    body = request.json or {}
    if not isinstance(body.get("title"), str) or not body["title"]:
        return Reply(422, {"message": "Invalid request.\n\ntitle is required."})
    repo = f"{m['owner']}/{m['repo']}".lower()
    with fake._lock:
        number = 1 + sum(1 for r, _ in fake.issues if r == repo)
        fake.issues[repo, number] = {
            "number": number,
            "title": body["title"],
            "body": body.get("body", ""),
            "state": "open",
        }
        issue = dict(fake.issues[repo, number])
        if fake.issue_answers_lost > 0:
            fake.issue_answers_lost -= 1
            return Reply(502, {"message": "Server Error"})
    _answer_held(fake, fake.issue_answer_delay)
    return Reply(201, issue | {"url": f"{fake.url}/repos/{repo}/issues/{number}"})


def _issues_list(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    """The repository's issues, newest first, a page at a time (``state=all`` includes closed ones)."""
    if not _installed_on(fake, request, m):
        return _unauthorized()
    repo = f"{m['owner']}/{m['repo']}".lower()
    query = {k: v[-1] for k, v in parse_qs(request.query).items()}
    per_page, page = int(query.get("per_page", 30)), int(query.get("page", 1))
    with fake._lock:
        found = [dict(i) for (r, _), i in sorted(fake.issues.items(), key=lambda kv: -kv[0][1]) if r == repo]
    if query.get("state", "open") != "all":
        found = [i for i in found if i["state"] == query.get("state", "open")]
    shown = found[(page - 1) * per_page : page * per_page]
    return Reply(200, [i | {"url": f"{fake.url}/repos/{repo}/issues/{i['number']}"} for i in shown])


def _issue_update(fake: FakeGitHub, request: Request, m: re.Match) -> Reply:
    if not _installed_on(fake, request, m):
        return _unauthorized()
    repo = f"{m['owner']}/{m['repo']}".lower()
    with fake._lock:
        issue = fake.issues.get((repo, int(m["number"])))
        if issue is None:
            return Reply(404, {"message": "Not Found"})
        issue.update({k: v for k, v in (request.json or {}).items() if k in ("state", "body", "title", "state_reason")})
        return Reply(200, dict(issue) | {"url": f"{fake.url}/repos/{repo}/issues/{issue['number']}"})
