"""The relay end to end, with no shortcut: every hop is a real process or a real HTTP request.

A signed ``pull_request`` webhook is POSTed to the live server; a real task worker (``manage.py qcluster``, a
subprocess on the Redis broker and this test's database) sends the ``repository_dispatch`` to the fake GitHub;
downstream CI echoes the ``client_payload`` it received there, unchanged, in two callbacks signed by the fake
OIDC issuer; the worker creates the PR check run on the fake GitHub and completes it; the HUD pages show the job.

Nothing waits for a fixed time: each step polls for its effect and fails with a message after DEADLINE_SECONDS.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

import pytest
import requests
from django.db import connection
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import Task

from ootci.models import Dispatch, JobResult
from relay.github import client as github
from tests.fakes.github import FakeGitHub, app_key_generate
from tests.fakes.oidc import reporter_body
from tests.relay.conftest import APP_ID, fixture_json, sign

BASE_DIR = Path(__file__).resolve().parents[2]
DEADLINE_SECONDS = 30
FAILED_TESTS = [
    "test_ops.py::TestCommonPRIVATEUSE1::test_add_npu_float32",
    "test_nn.py::TestNNDeviceTypePRIVATEUSE1::test_conv2d_npu_float16",
]
# The worker's records of its tasks: the dispatch. The check-run syncs are not kept when they succeed (save=False:
# django-q2 prunes its results table at every saved task); their effect at GitHub is what the test checks.
WORKER_TASKS = ["relay.tasks.delivery_dispatches_send"]
# What the worker reads from the settings; it gets this process's values through its environment.
WORKER_SETTINGS = {
    "DJANGO_SECRET_KEY": "SECRET_KEY",  # callback tokens and task payloads are signed with it
    "REDIS_URL": "REDIS_URL",
    "GITHUB_API_URL": "GITHUB_API_URL",
    "GITHUB_APP_ID": "GITHUB_APP_ID",
    "GITHUB_APP_PRIVATE_KEY": "GITHUB_APP_PRIVATE_KEY",
    "GITHUB_WEBHOOK_SECRET": "GITHUB_WEBHOOK_SECRET",
    "UPSTREAM_REPO": "UPSTREAM_REPO",
    "OIDC_ISSUER": "OIDC_ISSUER",
    "OIDC_AUDIENCE": "OIDC_AUDIENCE",
    "OIDC_JWKS_URL": "OIDC_JWKS_URL",
    "CLICKHOUSE_URL": "CLICKHOUSE_URL",
    "ARCHIVE_URL": "ARCHIVE_URL",
}

T = TypeVar("T")


class Worker:
    """A running ``manage.py qcluster``; its output goes to a file that a failed wait prints."""

    def __init__(self, process: subprocess.Popen, queue: str, log: Path):
        self.process = process
        self.queue = queue
        self.log = log

    def wait_for(self, what: str, probe: Callable[[], T]) -> T:
        """Poll ``probe`` until it returns something true; fail after DEADLINE_SECONDS, saying what was awaited."""
        deadline = time.monotonic() + DEADLINE_SECONDS
        while True:
            value = probe()
            if value:
                return value
            if self.process.poll() is not None:
                pytest.fail(f"The task worker exited ({self.process.returncode}) before {what}:\n{self.output()}")
            if time.monotonic() > deadline:
                pytest.fail(f"No {what} within {DEADLINE_SECONDS} s. Task worker output:\n{self.output()}")
            time.sleep(0.05)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def database_url() -> str:
    """The URL of the database this test runs on (pytest-django's test database, one per xdist worker)."""
    assert connection.vendor == "postgresql", "the task worker must share the test database: run on PostgreSQL"
    db = connection.settings_dict
    credentials = quote(db["USER"] or "", safe="") + (":" + quote(db["PASSWORD"], safe="") if db["PASSWORD"] else "")
    return f"postgres://{credentials}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def fake_github(settings):
    """The fake GitHub as the relay tests use it, with a key pair of its own: the worker acts as this App."""
    key = app_key_generate()
    fake = FakeGitHub(app_id=APP_ID, public_pem=key.public_pem).start()
    settings.GITHUB_API_URL = fake.url
    settings.GITHUB_APP_ID = str(APP_ID)
    settings.GITHUB_APP_PRIVATE_KEY = key.private_pem
    github.tokens_forget()
    yield fake
    fake.stop()
    github.tokens_forget()


@pytest.fixture
def task_worker(live_server, fake_github, oidc_issuer, settings, monkeypatch, tmp_path):
    """Start ``manage.py qcluster`` on a queue of its own, with this test's database, Redis and settings.

    This process stops running tasks inline and enqueues them on that queue instead, as a web process does.
    """
    queue = f"ootci-e2e-{uuid.uuid4().hex[:12]}"
    # django-q reads Q_CLUSTER once, at import: the name is the queue and the salt of signed task payloads.
    monkeypatch.setattr(Conf, "SYNC", False)
    monkeypatch.setattr(Conf, "PREFIX", queue)
    monkeypatch.setattr(Conf, "CLUSTER_NAME", queue)
    env = {
        **os.environ,
        **{name: str(getattr(settings, setting)) for name, setting in WORKER_SETTINGS.items()},
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url(),
        "OOTCI_TEST_QUEUE": queue,
        "Q_SYNC": "false",
        "Q_WORKERS": "1",
    }
    log = tmp_path / "qcluster.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "qcluster"],
            cwd=BASE_DIR,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the cluster's children are stopped with it
        )
    try:
        yield Worker(process, queue, log)
    finally:
        group_stop(process)
        get_broker(queue).delete_queue()


def group_stop(process: subprocess.Popen) -> None:
    """Stop the cluster and every process it forked; none may keep a connection to the test database open.

    Only the cluster's main process gets SIGTERM: it stops its children in order (signalled all at once, the main
    process waits for a sentinel that is gone). SIGKILL to the whole group is the fallback."""
    process.terminate()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        process.poll()
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def test_a_pull_request_goes_from_webhook_to_check_run_and_hud(
    live_server, task_worker, fake_github, downstream, settings
):
    ci = downstream("L4", device="npu")
    upstream = settings.UPSTREAM_REPO
    # A recorded delivery, moved to the upstream repo and given an id of its own.
    payload = fixture_json("pull_request.opened.payload")
    payload["repository"]["full_name"] = upstream
    number, head = payload["number"], payload["pull_request"]["head"]["sha"]
    delivery_id = str(uuid.uuid4())
    body = json.dumps(payload).encode()

    webhook = requests.post(
        live_server.url + "/github/webhook",
        data=body,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "pull_request",
            "X-GitHub-Delivery": delivery_id,
            "X-Hub-Signature-256": sign(body, settings.GITHUB_WEBHOOK_SECRET),
        },
        timeout=10,
    )
    assert webhook.status_code == 202, webhook.text
    assert webhook.json() == {"ok": True, "delivery_id": delivery_id, "dispatches": 1}

    # The worker, not this process, sends the repository_dispatch.
    [sent] = task_worker.wait_for(f"repository_dispatch to {ci.repo}", fake_github.dispatches)
    assert sent.path == f"/repos/{ci.repo}/dispatches"
    assert sent.json["event_type"] == "pull_request"
    client_payload = sent.json["client_payload"]
    assert client_payload["delivery_id"] == delivery_id
    assert client_payload["payload"] == payload
    task_worker.wait_for(
        "dispatch recorded as sent", lambda: Dispatch.objects.filter(status=Dispatch.Status.SENT).count() == 1
    )

    # Downstream CI echoes the client_payload it was sent, byte for byte, with its workflow report.
    started = ci.post({**client_payload, "workflow": reporter_body("pull_request.in_progress")["workflow"]})
    assert started.status_code == 200, started.text
    assert started.json()["status"] == "in_progress"

    check_runs = f"/repos/{upstream}/check-runs"
    [create] = task_worker.wait_for("check run created", lambda: fake_github.requests_to("POST", check_runs))
    assert create.status == 201
    [run] = fake_github.check_runs.values()
    assert (run["name"], run["head_sha"], run["status"]) == ("oot/npu/npu-ci/test-npu-float32", head, "in_progress")
    job = task_worker.wait_for(
        "check run id stored on the job", lambda: JobResult.objects.filter(upstream_check_run_id=run["id"]).first()
    )
    assert job.pr_number == number

    workflow = reporter_body("pull_request.completed.failure")["workflow"]
    workflow["test_results"]["failed_tests"] = FAILED_TESTS
    finished = ci.post({**client_payload, "workflow": workflow})
    assert finished.status_code == 200, finished.text
    assert finished.json()["status"] == "completed"

    [update] = task_worker.wait_for(
        "check run PATCHed", lambda: fake_github.requests_to("PATCH", f"{check_runs}/{run['id']}")
    )
    assert update.status == 200
    assert (update.json["status"], update.json["conclusion"]) == ("completed", "failure")
    assert (run["status"], run["conclusion"]) == ("completed", "failure")
    assert all(name in run["output"]["text"] for name in FAILED_TESTS)
    assert len(fake_github.check_runs) == 1

    pr_page = requests.get(f"{live_server.url}/oot/pr/{number}/", timeout=10)
    assert pr_page.status_code == 200
    [row] = re.findall(r'<tr class="test">.*?</tr>', pr_page.text, re.S)
    assert "npu-ci / test-npu-float32" in row
    assert "test failure" in row
    assert "8430 / 2 / 20" in row
    assert f'/runs/{run["id"]}">check run</a>: failure' in row

    org, name = ci.repo.split("/")
    backend_page = requests.get(f"{live_server.url}/oot/{org}/{name}/", timeout=10)
    assert backend_page.status_code == 200
    assert f'href="/oot/pr/{number}/"' in backend_page.text
    assert '<td class="cell test">' in backend_page.text
    assert all(f"<code>{test}</code>" in backend_page.text for test in FAILED_TESTS)

    # The worker ran the dispatch task (it records it once done).
    def worker_tasks() -> list[str] | None:
        done = Task.objects.filter(cluster=task_worker.queue, success=True, func__in=WORKER_TASKS)
        return sorted(done.values_list("func", flat=True)) if done.count() >= len(WORKER_TASKS) else None

    assert task_worker.wait_for("the worker's records of its tasks", worker_tasks) == WORKER_TASKS
