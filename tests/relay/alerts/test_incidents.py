"""On-call alerts on hand-built histories: each rule, the hysteresis and the cooldown, and every channel over real
HTTP (the fake GitHub for PR comments and issues, a local receiver for the webhook) or Django's locmem outbox."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.db import connection
from django.utils import timezone
from django_q.models import Schedule

from ootci.models import AlertRule, Backend, Delivery, Incident, JobResult, Notification, NotificationChannel, PrComment
from relay import tasks
from relay.alerts import incidents, notify
from relay.reports import follow_up_queue
from tests.fakes.github import POLL
from tests.hud import builders
from tests.hud.builders import ago, dispatch, job
from tests.hud.failing_history import BASE, HEAD, History, pushed

UPSTREAM = "pytorch/pytorch"
COMMENTS = f"/repos/{UPSTREAM}/issues/\\d+/comments"


@pytest.fixture
def run_now(django_capture_on_commit_callbacks):
    """Evaluate a job's rules as the task does, and run what it queues after the commit (the notification sends)."""

    def run(j: JobResult) -> str:
        with django_capture_on_commit_callbacks() as queued:
            answer = incidents.job_alerts_evaluate(job_id=j.pk)
        if answer == "queued":  # the PR rule's task: run here, for its answer
            with django_capture_on_commit_callbacks(execute=True):
                return incidents.pr_alerts_evaluate(job_id=j.pk)
        for callback in queued:
            callback()
        return answer

    return run


def pr_job(backend, name: str, conclusion: str = "success", *, attempt: int = 1, tests=(), pr: int = 7, **fields):
    failed = len(tests) if conclusion == "failure" and tests else None
    return job(
        backend,
        name=name,
        conclusion=conclusion,
        event_type="pull_request",
        pr_number=pr,
        head_sha="a" * 40,
        run_id=f"{name}-run",
        run_attempt=attempt,
        failed=failed,
        failed_tests=list(tests),
        created_at=ago(minutes=60 - attempt),
        **fields,
    )


def baseline(backend, conclusion: str, *, n: int, event: str = "nightly", tests=()):
    return job(
        backend,
        name="unit",
        conclusion=conclusion,
        event_type=event,
        head_sha=f"{n:040d}",
        finished=ago(hours=48 - n),
        failed=len(tests) or None,
        failed_tests=list(tests),
    )


def rules_installed() -> None:
    """The default rules (a migration installs them; a transactional test's flush removes them)."""
    for kind, threshold in (
        ("baseline_failures", 3),
        ("pr_test_failure", 1),
        ("relay_health", 20),
        ("gate_failing", 1),
        ("stale_results", 1),
        ("sick_runner", 0),
        ("skips_growing", 0),
    ):
        AlertRule.objects.get_or_create(kind=kind, backend=None, defaults={"threshold": threshold})


class Receiver:
    """A local HTTP endpoint for the webhook channel; answers ``status`` and keeps what it got."""

    def __init__(self, status: int = 200):
        self.status, self.got = status, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                outer.got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(outer.status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(POLL,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def stop(self):
        self.server.shutdown()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.stop()


@pytest.fixture
def l4(make_backend, fake_github, settings):
    rules_installed()
    settings.UPSTREAM_REPO = UPSTREAM
    settings.NOTIFY_RETRY_SECONDS = 0
    backend = make_backend("ascend/npu", "L4", device="npu", oncalls=["alice"])
    NotificationChannel.objects.create(backend=backend, kind="pr_comment")
    return backend


# --- PR test failures --------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_pr_test_failure_comments_once_then_edits_in_place_and_resolves(l4, fake_github, run_now):
    assert run_now(pr_job(l4, "build")) == "quiet"  # a success pings nobody
    assert run_now(pr_job(l4, "ut", "failure", tests=["test_add"])) == "opened"
    [comment] = fake_github.comments.values()
    assert comment["issue"] == 7 and "ut" in comment["body"] and "`test_add`" in comment["body"]

    assert run_now(pr_job(l4, "ut", "failure", attempt=2, tests=["test_add", "test_mul"])) == "updated"
    assert run_now(pr_job(l4, "ut", attempt=3)) == "resolved"

    [comment] = fake_github.comments.values()
    assert comment["edits"] == 2 and "Resolved" in comment["body"]
    assert len(fake_github.requests_to("POST", COMMENTS)) == 1
    assert len(fake_github.requests_to("PATCH", f"/repos/{UPSTREAM}/issues/comments/\\d+")) == 2
    assert Incident.objects.get().state == "resolved"
    assert Notification.objects.get().status == "sent"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("level", "conclusion", "tests"), [("L2", "failure", ["t"]), ("L4", "failure", []), ("L4", "timed_out", [])]
)
def test_no_ping_for_l2_prs_or_infrastructure_failures(make_backend, fake_github, run_now, level, conclusion, tests):
    backend = make_backend("a/npu", level, device="npu")
    NotificationChannel.objects.create(backend=backend, kind="pr_comment")

    run_now(pr_job(backend, "ut", conclusion, tests=tests))

    assert not Incident.objects.exists() and not fake_github.comments


@pytest.mark.django_db
def test_a_test_failing_on_the_baseline_too_is_not_new_on_the_pr(l4, fake_github, run_now):
    baseline(l4, "failure", n=1, tests=["test_known"])
    job(
        l4,
        name="ut",
        conclusion="failure",
        event_type="nightly",
        head_sha="b" * 40,
        failed=1,
        failed_tests=["test_known"],
    )

    run_now(pr_job(l4, "ut", "failure", tests=["test_known"]))
    assert not Incident.objects.exists()
    run_now(pr_job(l4, "ut", "failure", attempt=2, tests=["test_known", "test_new"]))
    assert Incident.objects.get().state == "firing"


@pytest.mark.django_db(transaction=True)
def test_100_concurrent_completions_make_one_comment(l4, fake_github):
    jobs = [pr_job(l4, f"shard-{i}", "failure", tests=[f"test_{i}"]) for i in range(100)]
    go = threading.Barrier(20)

    def evaluate(chunk):
        go.wait()
        try:
            for j in chunk:
                incidents.job_alerts_evaluate(job_id=j.pk)  # Q_SYNC: the sends run inline after each commit
        finally:
            connection.close()

    threads = [threading.Thread(target=evaluate, args=(jobs[i::20],)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(fake_github.requests_to("POST", COMMENTS)) == 1
    [comment] = fake_github.comments.values()
    assert Incident.objects.count() == 1
    assert comment["body"].count(" in ci / shard-") == 100  # the last edit shows every failing shard
    assert "**NEW**" in comment["body"]  # the names its callbacks gave, with no baseline to clear them


# --- baseline, hysteresis, cooldown, issue ----------------------------------------------------------------------


@pytest.mark.django_db
def test_three_baseline_failures_open_an_issue_and_three_greens_close_it(l4, fake_github, run_now):
    NotificationChannel.objects.create(backend=l4, kind="repo_issue")
    assert run_now(baseline(l4, "failure", n=1)) == "nothing"
    assert run_now(baseline(l4, "failure", n=2)) == "nothing"
    assert run_now(baseline(l4, "timed_out", n=3, event="push")) == "opened"
    assert run_now(baseline(l4, "failure", n=4)) == "updated"  # the same incident: opened once
    ((key, issue),) = fake_github.issues.items()
    assert key == ("ascend/npu", 1) and issue["state"] == "open" and "3 baseline runs" in issue["title"]

    assert [run_now(baseline(l4, "success", n=5 + i)) for i in range(3)] == ["green", "green", "resolved"]

    assert fake_github.issues["ascend/npu", 1]["state"] == "closed"
    assert Incident.objects.get().state == "resolved"


@pytest.mark.django_db
def test_successes_followed_up_in_bulk_still_resolve_what_fires(
    l4, fake_github, run_now, queued_tasks, django_capture_on_commit_callbacks
):
    """The bulk task reads a group of successes, and whether their incidents fire, in a statement each."""
    for n in range(1, 4):
        run_now(baseline(l4, "failure", n=n))
    run_now(pr_job(l4, "ut", "failure", tests=["test_new"]))
    assert Incident.objects.filter(state="firing").count() == 2
    queued_tasks()
    quiet = baseline(Backend.objects.create(repo="intel/xpu", level="L2"), "success", n=5)
    greens = [baseline(l4, "success", n=5 + i) for i in range(3)] + [pr_job(l4, "ut", attempt=2), quiet]
    for green in greens:
        follow_up_queue.follow_up_queue(green.pk, conclusion="success")
    assert queued_tasks() == [("relay.tasks.job_follow_ups", ())]

    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.job_follow_ups() == {"followed_up": 5}
    assert Incident.objects.get(fingerprint__startswith="baseline_failures:").state == "resolved"
    assert ("relay.tasks.pr_alerts", (greens[3].pk,)) in queued_tasks()  # the PR's incident, evaluated for its green
    with django_capture_on_commit_callbacks(execute=True):
        incidents.pr_alerts_evaluate(job_id=greens[3].pk)  # the task (its start takes the burst's mark away)
    assert set(Incident.objects.values_list("state", flat=True)) == {"resolved"}


@pytest.mark.django_db
def test_an_issue_github_opened_but_we_never_recorded_is_found_not_opened_again(l4, fake_github, run_now):
    NotificationChannel.objects.create(backend=l4, kind="repo_issue")
    fake_github.issue_answers_lost = 1  # GitHub opens the issue; its answer (or the worker) is lost
    for n in range(3):
        run_now(baseline(l4, "failure", n=n + 1))
    notification = Notification.objects.get(channel__kind="repo_issue")
    assert notification.status == "pending" and not notification.external_id

    assert notify.notification_send(notification_id=notification.pk, attempt=2) == "sent"

    assert list(fake_github.issues) == [("ascend/npu", 1)]  # one issue, found by its marker
    assert Notification.objects.get(pk=notification.pk).external_id == "1"


@pytest.mark.django_db
def test_a_failure_between_greens_starts_the_count_again(l4, run_now):
    for n in range(3):
        run_now(baseline(l4, "failure", n=n))
    run_now(baseline(l4, "success", n=3))
    run_now(baseline(l4, "success", n=4))
    run_now(baseline(l4, "failure", n=5))
    assert Incident.objects.get().greens == 0
    assert [run_now(baseline(l4, "success", n=6 + i)) for i in range(3)] == ["green", "green", "resolved"]


@pytest.mark.django_db
def test_a_success_with_nothing_firing_is_one_statement(l4, django_assert_num_queries):
    """Most completed jobs: a success opens nothing, and with nothing firing there is nothing to resolve, so neither
    the rule nor the job's history is read (a failure reads them, and a success resolves what fires)."""
    baseline(l4, "failure", n=1)
    pr_job(l4, "unit", "failure", tests=["test_a"])
    for success in (baseline(l4, "success", n=2), pr_job(l4, "unit", attempt=2)):
        success.backend = l4
        with django_assert_num_queries(1):
            assert incidents.job_alerts_evaluate(job_id=success.pk, job=success) == "quiet"


@pytest.mark.django_db
def test_the_cooldown_keeps_a_resolved_incident_from_reopening(l4, run_now):
    rule = AlertRule.objects.get(kind="baseline_failures", backend=None)
    for n in range(3):
        run_now(baseline(l4, "failure", n=n))
    for n in range(3, 6):
        run_now(baseline(l4, "success", n=n))
    for n in range(6, 9):
        result = run_now(baseline(l4, "failure", n=n))
    assert result == "cooling" and Incident.objects.count() == 1

    Incident.objects.update(resolved_at=timezone.now() - timedelta(minutes=rule.cooldown_minutes + 1))
    assert run_now(baseline(l4, "failure", n=9)) == "opened"


# --- webhook, email, retries --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_webhook_gets_slack_text_on_opening_and_resolution(l4, receiver, run_now):
    NotificationChannel.objects.create(backend=l4, kind="webhook", target=receiver.url)

    run_now(pr_job(l4, "ut", "failure", tests=["t"]))
    run_now(pr_job(l4, "ut", "failure", attempt=2, tests=["t", "u"]))  # an update: not re-sent
    run_now(pr_job(l4, "ut", attempt=3))

    assert [g["incident"]["state"] for g in receiver.got] == ["firing", "resolved"]
    assert receiver.got[0]["text"].startswith("[OOT CI] firing: ascend/npu: 1 job(s) with new failures on PR #7")


@pytest.mark.django_db
def test_email_goes_to_the_channel_addresses(l4, run_now):
    NotificationChannel.objects.create(backend=l4, kind="email", target="oncall@example.org, lead@example.org")

    run_now(pr_job(l4, "ut", "failure", tests=["t"]))

    [message] = mail.outbox
    assert message.to == ["oncall@example.org", "lead@example.org"]
    assert "firing" in message.subject and "PR #7" in message.body


@pytest.mark.django_db
def test_a_failing_webhook_is_retried_then_given_up(l4, settings, run_now):
    bad = Receiver(status=500)
    settings.NOTIFY_MAX_ATTEMPTS = 2
    NotificationChannel.objects.create(backend=l4, kind="webhook", target=bad.url)
    try:
        run_now(pr_job(l4, "ut", "failure", tests=["t"]))
        n = Notification.objects.get(channel__kind="webhook")
        assert (n.status, n.attempts, "answered 500" in n.last_error) == ("pending", 1, True)
        assert Schedule.objects.filter(func="relay.tasks.notification_send", args=f"({n.pk}, 2)").exists()

        assert notify.notification_send(notification_id=n.pk, attempt=2) == "failed"
        n.refresh_from_db()
        assert (n.status, n.attempts) == ("failed", 2)
        assert len(bad.got) == 2
    finally:
        bad.stop()


# --- relay health and gates -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_relay_health_fires_above_the_rate_and_resolves_after_three_good_checks(make_backend, receiver):
    rules_installed()
    backend = make_backend("a/npu", "L2")
    NotificationChannel.objects.create(backend=None, kind="webhook", target=receiver.url)
    now = timezone.now()
    for i in range(4):
        dispatch(backend, sha=f"{i:040d}", at=now - timedelta(minutes=5), status="failed" if i == 0 else "sent")

    assert incidents.relay_evaluate(now=now) == "opened"  # 1 of 4 = 25 % > 20 %
    later = now + timedelta(minutes=11)  # those dispatches left the window
    assert [incidents.relay_evaluate(now=later + timedelta(minutes=i)) for i in range(3)] == [
        "green",
        "green",
        "resolved",
    ]


@pytest.mark.django_db
def test_a_readiness_gate_newly_failing_opens_an_incident(l4):
    job(l4, name="t", conclusion="timed_out", event_type="pull_request", pr_number=1, head_sha="1" * 40)

    assert incidents.gates_evaluate(now=timezone.now()) == {"opened": 1}
    assert "timeout_rate" in Incident.objects.get().what


@pytest.mark.django_db(transaction=True)
def test_a_callback_that_completes_a_failing_job_comments_on_the_pr(fake_github, downstream, settings):
    settings.UPSTREAM_REPO = UPSTREAM
    rules_installed()
    ci = downstream("L4", device="npu")
    NotificationChannel.objects.create(backend=ci.backend, kind="pr_comment")

    assert ci.post(ci.body("pull_request.completed.failure", ci.dispatch())).status_code == 200

    [comment] = fake_github.comments.values()
    assert comment["issue"] == 4242 and "npu-ci / test-npu-float32" in comment["body"]


@pytest.mark.django_db
def test_the_pr_comment_groups_failures_by_verdict_and_follows_the_parsed_report(
    l4, fake_github, run_now, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    history = History(django_capture_on_commit_callbacks)
    pr = builders.pull_request(7, HEAD)
    pushed(pr, hours=2)
    history.baseline(l4, {"t_old": "failed", "t_new": "passed"}, sha=BASE, hours=10)
    job = pr_job(l4, "ut", "failure", tests=["callback::named"])
    assert run_now(job) == "opened"  # its callback's names: new, nothing on the baseline clears them

    history.report(job, {"t_old": "failed", "t_new": "failed"})  # parsed: the comment follows

    [comment] = fake_github.comments.values()
    body = comment["body"]
    assert body.index("**NEW**") < body.index("`test_x.py::TestX::t_new`") < body.index("**BROKEN-BASELINE**")
    assert body.index("**BROKEN-BASELINE**") < body.index("`test_x.py::TestX::t_old`")
    assert "callback::named" not in body and comment["edits"] == 1


@pytest.mark.django_db
def test_one_comment_per_pr_with_a_section_per_backend(l4, make_backend, fake_github, run_now):
    xpu = make_backend("intel/xpu", "L4", device="xpu", oncalls=["bob"])
    NotificationChannel.objects.create(backend=xpu, kind="pr_comment")

    assert run_now(pr_job(l4, "ut", "failure", tests=["test_add"])) == "opened"
    assert run_now(pr_job(xpu, "ut", "failure", tests=["test_mul"])) == "opened"
    assert run_now(pr_job(xpu, "ut", attempt=2)) == "resolved"

    [comment] = fake_github.comments.values()
    body = comment["body"]
    assert len(fake_github.requests_to("POST", COMMENTS)) == 1 and comment["edits"] == 2
    assert body.index("### ascend/npu (npu)") < body.index("`test_add`") < body.index("### intel/xpu (xpu)")
    assert "1 backend(s) with failures" in body and "@alice" in body and "@bob" in body
    assert "✅ **Resolved**" in body[body.index("### intel/xpu") :]  # the green backend's section, after the red one


@pytest.mark.django_db
def test_a_comment_github_wrote_but_we_never_recorded_is_edited_not_posted_again(l4, fake_github, run_now):
    # GitHub creates the comment and its answer is lost (a 502, or the worker died before the database write): the
    # retry finds ours by its marker and edits it.
    fake_github.comment_answers_lost = 1

    assert run_now(pr_job(l4, "ut", "failure", tests=["test_add"])) == "opened"
    notification = Notification.objects.get()
    assert notification.status == "pending" and notification.attempts == 1
    assert PrComment.objects.get(backend=None).comment_id is None  # what the database knows: nothing was posted

    assert notify.notification_send(notification_id=notification.pk, attempt=2) == "sent"

    assert len(fake_github.requests_to("POST", COMMENTS)) == 1 and len(fake_github.comments) == 1
    [comment] = fake_github.comments.values()
    assert PrComment.objects.get(backend=None).comment_id == comment["id"]
    assert PrComment.objects.get(backend=None).claimed_at is None


@pytest.mark.django_db
def test_a_relay_without_webhooks_while_github_answers_opens_an_incident(fake_github, settings):
    rules_installed()
    settings.UPSTREAM_REPO, settings.WEBHOOK_SILENCE_MINUTES = UPSTREAM, 120
    Delivery.objects.create(
        delivery_id="last", event="pull_request", upstream_repo=UPSTREAM, received_at=ago(minutes=180), payload={}
    )
    api = settings.GITHUB_API_URL
    settings.GITHUB_API_URL = "http://127.0.0.1:1"  # GitHub unreachable: the network's silence, not the relay's
    assert incidents.relay_silence_evaluate(now=timezone.now()) == "github unreachable"
    assert not Incident.objects.exists()

    settings.GITHUB_API_URL = api
    assert incidents.relay_silence_evaluate(now=timezone.now()) == "opened"
    assert Incident.objects.get().what.startswith("relay: no webhook from pytorch/pytorch for 180 minutes")

    now = timezone.now()
    Delivery.objects.create(delivery_id="new", event="push", upstream_repo=UPSTREAM, received_at=now, payload={})
    assert incidents.relay_silence_evaluate(now=timezone.now()) == "resolved"


@pytest.mark.django_db
def test_a_notification_another_sender_holds_is_left_to_it_and_tried_again(l4, fake_github, run_now):
    fake_github.comment_answers_lost = 1  # the first send fails: the notification stays pending
    run_now(pr_job(l4, "ut", "failure", tests=["test_add"]))
    notification = Notification.objects.get()
    Notification.objects.filter(pk=notification.pk).update(claimed_at=timezone.now())  # a sender at work

    assert notify.notification_send(notification_id=notification.pk, attempt=2) == "busy"
    assert len(fake_github.requests_to("POST", COMMENTS)) == 1  # nothing sent meanwhile
    assert Schedule.objects.filter(func="relay.tasks.notification_send", args=f"({notification.pk}, 2)").exists()


@pytest.mark.django_db
def test_a_notification_whose_send_was_lost_is_sent_again_by_the_schedule(l4, fake_github, settings):
    settings.GITHUB_TIMEOUT_SECONDS = 1  # a sender's claim lapses after 4 s
    incidents.pr_alerts_evaluate(job_id=pr_job(l4, "ut", "failure", tests=["test_add"]).pk)  # its send never runs
    notification = Notification.objects.get()
    assert notification.status == "pending" and not fake_github.comments
    now = timezone.now()
    assert notify.notifications_resume(now=now) == []  # just marked: its task may still be on its way

    lost = Notification.objects.filter(pk=notification.pk)
    lost.update(claimed_at=now - timedelta(seconds=2), updated_at=now - timedelta(seconds=5))  # a worker died
    assert notify.notifications_resume(now=now) == []  # its claim still holds
    lost.update(claimed_at=now - timedelta(seconds=5))
    assert notify.notifications_resume(now=timezone.now()) == [notification.pk]  # the task queued runs inline here

    notification.refresh_from_db()
    assert notification.status == "sent" and len(fake_github.comments) == 1
    assert incidents.periodic_evaluate()["resent"] == 0  # nothing pending any more


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_between_githubs_answer_and_the_database_write_leaves_one_comment(
    l4, fake_github, settings, app_key, tmp_path
):
    # The sender runs in a worker process of its own; GitHub writes the comment and holds its answer while the worker
    # is killed (SIGKILL: no cleanup, no database write). The next send finds the comment by its marker.
    job = pr_job(l4, "ut", "failure", tests=["test_add"])
    incidents.job_alerts_evaluate(job_id=job.pk)  # Q_SYNC sends it inline: undo that, the worker below must
    Notification.objects.update(status="pending", sent_state="", attempts=0)
    PrComment.objects.update(comment_id=None, body="")
    fake_github.comments.clear()
    fake_github.comment_answer_delay = 30
    notification = Notification.objects.get()
    key = tmp_path / "app.pem"
    key.write_text(app_key.private_pem)
    db = connection.settings_dict
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_DEBUG": "true",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "REDIS_URL": "",
        "GITHUB_API_URL": fake_github.url,
        "GITHUB_APP_ID": settings.GITHUB_APP_ID,
        "GITHUB_APP_PRIVATE_KEY": str(key),
        "UPSTREAM_REPO": UPSTREAM,
    }
    code = (
        "import django; django.setup(); from relay.alerts import notify; "
        f"notify.notification_send(notification_id={notification.pk})"
    )
    worker = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=settings.BASE_DIR)
    deadline = time.monotonic() + 30
    while not fake_github.comments:
        assert time.monotonic() < deadline and worker.poll() is None, "the worker never reached GitHub"
        time.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    assert PrComment.objects.get(backend=None).comment_id is None  # the database never heard of it
    fake_github.comment_answer_delay = 0
    settings.GITHUB_TIMEOUT_SECONDS = 1  # the dead worker's claims lapse after 4 timeouts
    time.sleep(4.1)

    assert notify.notification_send(notification_id=notification.pk, attempt=2) == "sent"

    assert len(fake_github.comments) == 1
    [comment] = fake_github.comments.values()
    assert PrComment.objects.get(backend=None).comment_id == comment["id"] and comment["edits"] <= 1


# --- a burst of jobs, evaluated once ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_burst_of_failed_shards_evaluates_its_pr_once_with_every_shard(
    l4, fake_github, queued_tasks, django_capture_on_commit_callbacks
):
    jobs = [pr_job(l4, f"shard-{i}", "failure", tests=[f"test_{i}"]) for i in range(5)]

    with django_capture_on_commit_callbacks(execute=True):  # the worker follows them up in a row
        answers = [incidents.job_alerts_evaluate(job_id=j.pk) for j in jobs[:3]]

    assert answers == ["queued", "coalesced", "coalesced"]
    assert queued_tasks() == [("relay.tasks.pr_alerts", (jobs[0].pk,))]
    assert tasks.pr_alerts(jobs[0].pk) == "opened"
    assert [d["job"] for d in Incident.objects.get().details["jobs"] if d["outcome"] == "test"] == [
        "ci / shard-0",
        "ci / shard-1",
        "ci / shard-2",
        "ci / shard-3",  # committed before the evaluation started: in it too
        "ci / shard-4",
    ]
    with django_capture_on_commit_callbacks(execute=True):
        assert incidents.job_alerts_evaluate(job_id=jobs[4].pk) == "queued"  # after it started: another one
    assert queued_tasks() == [("relay.tasks.pr_alerts", (jobs[4].pk,))]


@pytest.mark.django_db
def test_a_burst_of_jobs_that_say_where_they_ran_evaluates_the_runners_once(
    l4, queued_tasks, django_capture_on_commit_callbacks
):
    ran = [pr_job(l4, f"shard-{i}", environment={"runner": f"r{i % 2}"}) for i in range(4)]

    with django_capture_on_commit_callbacks(execute=True):
        for j in ran:
            incidents.job_alerts_evaluate(job_id=j.pk)

    assert queued_tasks() == [("relay.tasks.runners_alerts", (l4.pk,))]
    assert tasks.runners_alerts(l4.pk) == {}  # no runner is sick
    with django_capture_on_commit_callbacks(execute=True):
        incidents.job_alerts_evaluate(job_id=ran[0].pk)
    assert queued_tasks() == [("relay.tasks.runners_alerts", (l4.pk,))]


@pytest.mark.django_db
def test_with_the_cache_down_each_job_is_evaluated(l4, settings, queued_tasks, django_capture_on_commit_callbacks):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:9/0",  # nothing listens there
            "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2},
        }
    }
    jobs = [pr_job(l4, f"shard-{i}", "failure", tests=[f"test_{i}"]) for i in range(2)]

    with django_capture_on_commit_callbacks(execute=True):
        assert [incidents.job_alerts_evaluate(job_id=j.pk) for j in jobs] == ["queued", "queued"]
    assert queued_tasks() == [("relay.tasks.pr_alerts", (j.pk,)) for j in jobs]
