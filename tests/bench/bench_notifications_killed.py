"""Notifications exactly once with the worker killed (issue 27): 1,000 notifications (PR comments over 200 PRs, and
repository issues opened and closed with 3-in-a-row nightly breakages) sent by a real task worker (``manage.py
qcluster`` on Redis and this test's database) that is SIGKILLed, with every process of its group, at a random moment
within 1.5 s of its first call to GitHub, and started again. GitHub holds each comment's and issue's answer 50 ms
after writing it, so some kills land between GitHub's write and the database's. The alert schedule's sweep
(``notify.notifications_resume``) runs every fifth of a second instead of every minute, and results arrive no faster
than they are sent (at most 10 notifications pending). Goal: every PR has one comment and every incident at most one
issue, none posted twice, each with the text it should have at the end; nothing is left pending."""

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf

from ootci.models import AlertRule, Incident, Notification, NotificationChannel
from relay.alerts import incidents, notify
from tests.e2e.test_relay_end_to_end import BASE_DIR, database_url, group_stop
from tests.hud.builders import job
from tests.relay.alerts.test_incidents import pr_job, rules_installed

pytestmark = pytest.mark.django_db(transaction=True)
UPSTREAM = "pytorch/pytorch"
NOTIFICATIONS = 1000
DEADLINE_SECONDS = 600
BACKLOG = 10  # pending notifications at most while results arrive
CARRIED = {"pull_request": {"opened", "updated", "resolved"}, "nightly": {"opened", "resolved"}}


class Worker:
    """``manage.py qcluster`` in a process group of its own, killed at random moments by a thread of the test."""

    def __init__(self, env: dict, log, fake_github, seed: int):
        self.env, self.log, self.fake, self.rng = env, log, fake_github, random.Random(seed)
        self.process: subprocess.Popen | None = None
        self.kills = self.kills_in_held_answer = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._kill_at_random, daemon=True)

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "qcluster"],
            cwd=BASE_DIR,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _kill_at_random(self) -> None:
        """Once the worker is at work (it called GitHub since it started), kill it within the next 1.5 s."""
        while not self.stopping.is_set():
            calls = len(self.fake.requests)
            while len(self.fake.requests) == calls:
                if self.stopping.wait(0.02):
                    return
            if self.stopping.wait(self.rng.uniform(0.0, 1.5)):
                return
            self.kills_in_held_answer += self.fake.answers_held > 0
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.kills += 1
            self.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()
        group_stop(self.process)


def test_a_thousand_notifications_with_the_worker_killed_at_random_points_post_each_comment_and_issue_once(
    make_backend, fake_github, settings, monkeypatch, tmp_path
):
    rules_installed()
    AlertRule.objects.filter(kind=AlertRule.Kind.BASELINE).update(cooldown_minutes=0, resolve_after=1)
    settings.UPSTREAM_REPO, settings.NOTIFY_RETRY_SECONDS, settings.GITHUB_TIMEOUT_SECONDS = UPSTREAM, 1, 1
    backend = make_backend("ascend/npu", "L4", device="npu", oncalls=["alice"])
    NotificationChannel.objects.create(backend=backend, kind="pr_comment")
    NotificationChannel.objects.create(backend=backend, kind="repo_issue")
    fake_github.comment_answer_delay = fake_github.issue_answer_delay = 0.05

    queue = f"ootci-kill-{uuid.uuid4().hex[:12]}"
    monkeypatch.setattr(Conf, "SYNC", False)  # this process enqueues, as a web process does; the worker sends
    monkeypatch.setattr(Conf, "PREFIX", queue)
    monkeypatch.setattr(Conf, "CLUSTER_NAME", queue)
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "GITHUB_API_URL": fake_github.url,
        "GITHUB_APP_ID": str(settings.GITHUB_APP_ID),
        "GITHUB_APP_PRIVATE_KEY": settings.GITHUB_APP_PRIVATE_KEY,
        "UPSTREAM_REPO": UPSTREAM,
        "GITHUB_TIMEOUT_SECONDS": "1",
        "NOTIFY_RETRY_SECONDS": "1",
        "OOTCI_TEST_QUEUE": queue,
        "Q_SYNC": "false",
        "Q_WORKERS": "1",
    }
    rng, start = random.Random(27), time.monotonic()
    with (tmp_path / "qcluster.log").open("wb") as log:
        worker = Worker(env, log, fake_github, seed=2700)
        worker.start()
        worker.thread.start()
        try:
            notifications, n, finished = 0, 0, timezone.now() - timedelta(days=30)
            nightly = dict.fromkeys(range(25), 0)  # 25 nightly jobs: 3 red in a row open, the 10th run, green, resolves
            while notifications < NOTIFICATIONS:
                n += 1
                if rng.random() < 0.8:
                    kind, j = "pull_request", pr_job(backend, f"ut-{n}", "failure", tests=[f"test_{n}"], pr=1 + n % 200)
                else:
                    k = rng.randrange(25)
                    nightly[k] += 1
                    red = nightly[k] % 10 != 0
                    finished += timedelta(minutes=1)
                    kind, j = (
                        "nightly",
                        job(
                            backend,
                            name=f"unit-{k}",
                            conclusion="failure" if red else "success",
                            event_type="nightly",
                            head_sha=f"{n:040x}",
                            finished=finished,
                            failed=1 if red else None,
                            failed_tests=[f"test_nightly_{k}"] if red else [],
                        ),
                    )
                # A PR job's rule is the task its follow-up queues (once for a burst): run here for its answer.
                evaluate = incidents.pr_alerts_evaluate if kind == "pull_request" else incidents.job_alerts_evaluate
                notifications += evaluate(job_id=j.pk) in CARRIED[kind]
                while Notification.objects.filter(status="pending").count() > BACKLOG:  # results arrive as sent
                    notify.notifications_resume(now=timezone.now())  # the alert schedule's sweep
                    time.sleep(0.2)
            made = time.monotonic() - start
            deadline = time.monotonic() + DEADLINE_SECONDS
            while Notification.objects.exclude(status="sent").exists():
                assert time.monotonic() < deadline, (
                    "notifications still pending:\n" + (tmp_path / "qcluster.log").read_text(errors="replace")[-3000:]
                )
                notify.notifications_resume(now=timezone.now())
                time.sleep(0.2)
        finally:
            worker.stop()
            get_broker(queue).delete_queue()

    comments = Counter((c["repo"], c["issue"]) for c in fake_github.comments.values())
    prs = set(Incident.objects.filter(rule__kind=AlertRule.Kind.PR_TEST).values_list("pr_number", flat=True))
    markers = Counter(issue["body"][issue["body"].rindex("<!-- oot-ci:") :] for issue in fake_github.issues.values())
    breaks = Incident.objects.filter(rule__kind=AlertRule.Kind.BASELINE)
    print(
        f"\n{notifications} notifications ({n} job results made in {made:.0f} s, all sent after "
        f"{time.monotonic() - start:.0f} s); the worker killed {worker.kills} times, {worker.kills_in_held_answer} "
        f"of them while GitHub held a written comment's or issue's answer; {len(comments)} PRs with a comment, at "
        f"most {max(comments.values())} on one (goal 1); {breaks.count()} breakages, {len(markers)} issues, at most "
        f"{max(markers.values())} per breakage (goal 1)"
    )
    assert worker.kills >= 10 and worker.kills_in_held_answer >= 1
    assert set(comments.values()) == {1} and {pr for _, pr in comments} == prs and len(prs) == 200
    for comment in fake_github.comments.values():  # the text each comment should have, nothing lost
        assert comment["body"] == notify.pr_comment_body(UPSTREAM, comment["issue"])
    # An incident resolved before its opening was sent has no issue (the send tells the incident as it is then).
    assert set(markers.values()) == {1} and len(markers) >= 20
    for incident in breaks:
        issues = [i for i in fake_github.issues.values() if f"<!-- oot-ci:incident:{incident.pk} -->" in i["body"]]
        if incident.state == Incident.State.FIRING:
            assert [i["state"] for i in issues] == ["open"]
        else:
            assert [i["state"] for i in issues] in ([], ["closed"])
