"""Relay fixtures: the fake GitHub API (real HTTP, driven by PyGithub) and signed webhook deliveries."""

import copy
import hashlib
import hmac
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from django_q.models import Schedule
from django_q.scheduler import scheduler

from relay.github import client as github
from tests.fakes.github import AppKey, FakeGitHub, app_key_generate

FIXTURES = Path(__file__).parent / "fixtures" / "github"
UPSTREAM = "Codertocat/Hello-World"  # the repository of the recorded payloads
APP_ID = 4242


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / f"{name}.json").read_bytes()


def fixture_json(name: str) -> dict[str, Any]:
    return json.loads(fixture_bytes(name))


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def run_due_retries(func: str) -> None:
    """What a qcluster's scheduler does once: enqueue the due one-off retries of task ``func`` (tasks run inline,
    Q_SYNC). Only those: the periodic schedules that migrations install are pushed out of the way."""
    Schedule.objects.exclude(func=func).update(next_run=timezone.now() + timedelta(days=1))
    scheduler()


def mutated(document: dict, path: tuple[str, ...], key: str, value: Any) -> dict:
    """A copy of ``document`` with ``key`` of the object at ``path`` set to ``value`` (``...``: removed)."""
    changed = copy.deepcopy(document)
    target = changed
    for step in path:
        target = target[step]
    if value is ...:
        del target[key]
    else:
        target[key] = value
    return changed


@pytest.fixture(scope="session")
def app_key() -> AppKey:
    return app_key_generate()


@pytest.fixture
def fake_github(settings, app_key):
    """A started fake GitHub; the settings point PyGithub at it as our GitHub App."""
    fake = FakeGitHub(app_id=APP_ID, public_pem=app_key.public_pem).start()
    settings.GITHUB_API_URL = fake.url
    settings.GITHUB_APP_ID = str(APP_ID)
    settings.GITHUB_APP_PRIVATE_KEY = app_key.private_pem
    # Retries in milliseconds rather than seconds: the policy is the same, the suite stays fast.
    settings.DISPATCH_RETRY_BASE_SECONDS = 0.01
    settings.DISPATCH_RETRY_MAX_SECONDS = 0.05
    github.tokens_forget()
    yield fake
    fake.stop()
    github.tokens_forget()


@pytest.fixture
def upstream(settings) -> str:
    settings.UPSTREAM_REPO = UPSTREAM
    return UPSTREAM


@pytest.fixture
def post_webhook(client, settings, upstream):
    """POST a delivery signed like GitHub: ``payload`` is a fixture name (its exact bytes) or a dict."""

    def post(event: str, payload: str | dict, *, delivery_id: str | None = None, signature: str | None = None):
        body = fixture_bytes(payload) if isinstance(payload, str) else json.dumps(payload).encode()
        headers = {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(body, settings.GITHUB_WEBHOOK_SECRET) if signature is None else signature,
        }
        if signature == "":
            del headers["X-Hub-Signature-256"]
        return client.post("/github/webhook", data=body, content_type="application/json", headers=headers)

    return post


# --- failed jobs whose GitHub Actions log the fake GitHub serves (issue 16) ---

FAILED_JOB_LOG = (
    b"2026-03-01T10:00:00.0000000Z Current runner version: '2.321.0'\n"
    b"2026-03-01T10:00:01.0000000Z ##[group]Run actions/checkout@v4\n"
    b"2026-03-01T10:00:02.0000000Z ##[group]Run python test/run_test.py\n"
    b"2026-03-01T10:00:03.0000000Z building\n"
    b"2026-03-01T10:00:04.0000000Z ld: error: undefined symbol: at::native::copy_stub\n"
    b"2026-03-01T10:00:05.0000000Z ##[error]Process completed with exit code 1.\n"
)


@pytest.fixture
def failing_run(fake_github, settings, tmp_path, failure_rules):
    settings.TEST_REPORTS_URL = tmp_path.as_uri()

    def make(repo: str, *, run_id: int = 24033272679, steps=None, log: bytes = FAILED_JOB_LOG) -> int:
        job_id = 7_100_000 + len(fake_github.job_logs)
        steps = steps or [
            {"name": "Set up job", "number": 1, "conclusion": "success"},
            {
                "name": "Build and test",
                "number": 3,
                "conclusion": "failure",
                "started_at": "2026-03-01T10:00:02Z",
                "completed_at": "2026-03-01T10:00:05Z",
            },
        ]
        fake_github.actions_jobs[(repo.lower(), run_id, 1)] = [
            {"id": job_id - 1, "name": "lint", "conclusion": "success", "steps": []},
            {"id": job_id, "name": "test-npu", "conclusion": "failure", "steps": steps},
        ]
        fake_github.job_logs[job_id] = log
        return job_id

    return make


def completed_failure(ci, **workflow):
    dispatch = ci.dispatch()
    fields = {"url": f"https://github.com/{ci.repo}/actions/runs/24033272679", "run_id": "24033272679"}
    fields |= {"job_name": "test-npu", "run_attempt": 1, "test_results": {"passed": 10, "failed": 0}}
    return ci.post(ci.body("pull_request.completed.failure", dispatch, **(fields | workflow)))


@pytest.fixture
def queued_tasks(monkeypatch):
    """Tasks queued as in production, not run at once as the tests' Q_SYNC does: ``queued_tasks()`` takes what was
    queued since it was last asked, as (function name, args)."""
    from django_q.brokers import get_broker
    from django_q.conf import Conf
    from django_q.signing import SignedPackage

    monkeypatch.setattr(Conf, "SYNC", False)
    broker = get_broker()
    broker.purge_queue()

    def queued() -> list[tuple[str, tuple]]:
        found = []
        while broker.queue_size():
            for ack_id, task in broker.dequeue():
                package = SignedPackage.loads(task)
                found.append((package["func"], package["args"]))
                broker.acknowledge(ack_id)
        return found

    return queued
