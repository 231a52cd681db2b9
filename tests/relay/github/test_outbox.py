"""repository_dispatch to backends: through PyGithub, as the GitHub App, against the fake GitHub over HTTP.

Tasks run inline once the webhook's transaction commits (Q_SYNC), so these tests use real
transactions; tests that play a worker call the tasks directly.
"""

import threading
import time
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from ootci.models import Delivery, Dispatch
from relay import tasks
from relay.endpoints.tokens import callback_token_matches
from relay.github import outbox
from tests.fakes.github import Reply
from tests.relay.conftest import UPSTREAM, fixture_json

pytestmark = pytest.mark.django_db(transaction=True)


def pending_dispatch(backend, *, delivery_id: str = "d-1", fixture: str = "pull_request.opened.payload", **fields):
    """A committed pending Dispatch whose task has not run: what the webhook leaves for a worker."""
    payload = fixture_json(fixture)
    delivery, _ = Delivery.objects.get_or_create(
        delivery_id=delivery_id,
        defaults={"event": "pull_request", "action": payload["action"], "upstream_repo": UPSTREAM, "payload": payload},
    )
    return Dispatch.objects.create(delivery=delivery, backend=backend, **fields)


def test_it_sends_the_client_payload_of_the_design(fake_github, post_webhook, make_backend):
    make_backend("org/a")
    response = post_webhook("pull_request", "pull_request.opened.payload", delivery_id="d-42")
    assert response.status_code == 202
    [sent] = fake_github.dispatches()
    assert sent.path == "/repos/org/a/dispatches"
    assert sent.headers["authorization"].split()[1] in fake_github.tokens  # an installation token, not the JWT
    body = sent.json
    assert body["event_type"] == "pull_request"
    client_payload = body["client_payload"]
    assert set(client_payload) == {"event_type", "delivery_id", "payload", "callback_token"}
    assert client_payload["event_type"] == "pull_request"
    assert client_payload["delivery_id"] == "d-42"
    assert client_payload["payload"] == fixture_json("pull_request.opened.payload")
    assert callback_token_matches(client_payload["callback_token"], delivery_id="d-42", repo="org/a")
    assert not callback_token_matches(client_payload["callback_token"], delivery_id="d-42", repo="org/b")
    dispatch = Dispatch.objects.get()
    assert (dispatch.status, dispatch.attempts, dispatch.payload_trimmed) == ("sent", 1, False)
    assert dispatch.sent_at is not None


def test_a_push_is_dispatched_as_a_push(fake_github, post_webhook, make_backend):
    make_backend("org/a")
    post_webhook("push", "push.with-new-branch.payload", delivery_id="p-1")
    [sent] = fake_github.dispatches()
    assert sent.json["event_type"] == "push"
    assert sent.json["client_payload"]["event_type"] == "push"
    assert sent.json["client_payload"]["payload"]["ref"] == "refs/heads/master"


def test_a_redelivery_sends_nothing_again(fake_github, post_webhook, make_backend):
    make_backend("org/a")
    make_backend("org/b")
    post_webhook("pull_request", "pull_request.opened.payload", delivery_id="again")
    response = post_webhook("pull_request", "pull_request.opened.payload", delivery_id="again")
    assert response.status_code == 200
    assert len(fake_github.dispatches()) == 2
    assert set(Dispatch.objects.values_list("status", flat=True)) == {"sent"}


def test_github_500s_are_retried_until_one_dispatch_per_backend_succeeds(fake_github, post_webhook, make_backend):
    make_backend("org/a")
    make_backend("org/b")
    fake_github.script("POST", "/repos/org/a/dispatches", Reply(500, {"message": "Server Error"}), Reply(502))
    post_webhook("pull_request", "pull_request.opened.payload")
    assert sorted(r.path for r in fake_github.dispatches()) == ["/repos/org/a/dispatches", "/repos/org/b/dispatches"]
    a = Dispatch.objects.get(backend__repo="org/a")
    assert (a.status, a.attempts) == ("sent", 3)
    assert "GitHub 502" in a.last_error  # the last failure stays visible
    assert Dispatch.objects.get(backend__repo="org/b").attempts == 1


def test_a_422_fails_at_once_with_the_reason(fake_github, post_webhook, make_backend):
    make_backend("org/a")
    fake_github.script("POST", "/repos/org/a/dispatches", Reply(422, {"message": "Invalid request: no workflow"}))
    post_webhook("pull_request", "pull_request.opened.payload")
    dispatch = Dispatch.objects.get()
    assert (dispatch.status, dispatch.attempts) == ("failed", 1)
    assert dispatch.last_error == "GitHub 422 on POST /repos/org/a/dispatches: Invalid request: no workflow"
    assert len(fake_github.requests_to("POST", "/repos/org/a/dispatches")) == 1
    assert dispatch.sent_at is None


def test_attempts_in_a_task_are_bounded_then_left_to_the_schedule(fake_github, post_webhook, make_backend, settings):
    settings.DISPATCH_MAX_ATTEMPTS = 3
    make_backend("org/a")
    fake_github.script("POST", "/repos/org/a/dispatches", *[Reply(503)] * 5)
    post_webhook("pull_request", "pull_request.opened.payload")
    dispatch = Dispatch.objects.get()
    assert (dispatch.status, dispatch.attempts) == ("pending", 3)
    assert "GitHub 503" in dispatch.last_error
    assert dispatch.retry_at > timezone.now() + timedelta(seconds=25)  # at least half a minute: jitter of one
    assert len(fake_github.requests_to("POST", "/repos/org/a/dispatches")) == 3


def test_an_uninstalled_app_fails_with_a_clear_reason(fake_github, post_webhook, make_backend):
    make_backend("org/a")
    fake_github.uninstalled.add("org/a")
    post_webhook("pull_request", "pull_request.opened.payload")
    dispatch = Dispatch.objects.get()
    assert dispatch.status == "failed"
    assert dispatch.last_error == "the GitHub App is not installed on org/a (404)"
    assert not fake_github.requests_to("POST", "/repos/org/a/dispatches")


def test_an_oversized_payload_is_trimmed_not_rejected(fake_github, post_webhook, make_backend):
    make_backend("org/a")
    payload = fixture_json("pull_request.opened.payload")
    payload["pull_request"]["body"] = "x" * 100_000
    post_webhook("pull_request", payload, delivery_id="big")
    [sent] = fake_github.dispatches()  # the fake answers 422 to anything of 64 KB or more
    body = sent.json["client_payload"]["payload"]["pull_request"]["body"]
    assert body.endswith("… [trimmed by OOT CI]")
    assert len(body) < 3000
    assert sent.json["client_payload"]["payload"]["pull_request"]["title"] == payload["pull_request"]["title"]
    assert sent.json["client_payload"]["delivery_id"] == "big"
    dispatch = Dispatch.objects.get()
    assert (dispatch.status, dispatch.payload_trimmed) == ("sent", True)
    assert Delivery.objects.get().payload["pull_request"]["body"] == "x" * 100_000  # the stored copy is whole


def test_a_rate_limit_is_waited_out_and_not_counted_as_a_failure(fake_github, post_webhook, make_backend, settings):
    settings.DISPATCH_MAX_ATTEMPTS = 1  # one failure would end it: the rate limit must not count as one
    make_backend("org/a")
    fake_github.script("POST", "/repos/org/a/dispatches", Reply.rate_limited(reset_in=1))
    started, cpu = time.monotonic(), time.process_time()
    post_webhook("pull_request", "pull_request.opened.payload")
    assert time.monotonic() - started >= 0.9
    assert time.process_time() - cpu < 0.5  # the task slept through the wait, it did not spin
    dispatch = Dispatch.objects.get()
    assert (dispatch.status, dispatch.attempts) == ("sent", 2)
    assert "rate limited" in dispatch.last_error
    assert len(fake_github.dispatches()) == 1


def test_a_secondary_rate_limit_with_retry_after_is_waited_out(fake_github, post_webhook, make_backend, settings):
    settings.DISPATCH_MAX_ATTEMPTS = 1
    make_backend("org/a")
    fake_github.script("POST", "/repos/org/a/dispatches", Reply.retry_after(1))
    post_webhook("pull_request", "pull_request.opened.payload")
    assert Dispatch.objects.get().status == "sent"


def test_a_long_rate_limit_is_left_to_the_schedule_until_it_resets(fake_github, post_webhook, make_backend):
    make_backend("org/a")
    fake_github.script("POST", "/repos/org/a/dispatches", Reply.rate_limited(reset_in=3600))
    post_webhook("pull_request", "pull_request.opened.payload")
    dispatch = Dispatch.objects.get()
    assert dispatch.status == "pending"
    assert "rate limited" in dispatch.last_error and "tried again later" in dispatch.last_error
    assert timedelta(minutes=59) < dispatch.retry_at - timezone.now() <= timedelta(hours=1, seconds=2)
    assert tasks.dispatches_resend_stale() == {}  # not due yet
    Dispatch.objects.update(updated_at=timezone.now() - timedelta(minutes=5))
    assert tasks.dispatches_resend_stale() == {}  # nor stale: it is waiting, not abandoned
    Dispatch.objects.update(retry_at=timezone.now())
    assert tasks.dispatches_resend_stale() == {"sent": 1}
    assert Dispatch.objects.get().status == "sent"
    assert len(fake_github.dispatches()) == 1


def test_running_the_task_twice_sends_once(fake_github, make_backend):
    dispatch = pending_dispatch(make_backend("org/a"))
    assert tasks.dispatch_send(dispatch.pk) == "sent"
    assert tasks.dispatch_send(dispatch.pk) == "skipped"
    assert tasks.delivery_dispatches_send(dispatch.delivery_id) == {}
    assert len(fake_github.dispatches()) == 1


def test_two_workers_racing_for_one_dispatch_send_it_once(fake_github, make_backend):
    dispatch = pending_dispatch(make_backend("org/a"))
    fake_github.latency = 0.2
    results = []
    barrier = threading.Barrier(2)

    def work():
        barrier.wait()
        try:
            results.append(tasks.dispatch_send(dispatch.pk))
        finally:
            connection.close()  # this thread's own: left open, it keeps the test database from being dropped

    workers = [threading.Thread(target=work) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(results) == ["sent", "skipped"]
    assert len(fake_github.dispatches()) == 1
    assert Dispatch.objects.get().attempts == 1


def test_a_dispatch_claimed_by_a_killed_worker_is_sent_once_by_the_sweeper(fake_github, make_backend):
    # What a worker killed between claiming and sending leaves behind: a claimed, pending row.
    dispatch = pending_dispatch(make_backend("org/a"), attempts=1)
    assert tasks.dispatch_send(dispatch.pk) == "skipped"  # the broker's redelivery: the claim still holds
    assert tasks.dispatches_resend_stale() == {}
    Dispatch.objects.update(updated_at=timezone.now() - timedelta(minutes=3))
    assert tasks.dispatches_resend_stale() == {"sent": 1}
    assert tasks.dispatches_resend_stale() == {}
    assert len(fake_github.dispatches()) == 1
    assert Dispatch.objects.get().attempts == 2


def test_a_dispatch_whose_task_was_lost_is_sent_by_the_sweeper(fake_github, make_backend):
    backend = make_backend("org/a")
    dispatch = pending_dispatch(backend)
    Dispatch.objects.update(updated_at=timezone.now() - timedelta(minutes=3))
    assert tasks.dispatches_resend_stale() == {"sent": 1}
    dispatch.refresh_from_db()
    assert (dispatch.status, dispatch.attempts) == ("sent", 1)


def test_the_installation_token_is_reused_until_it_nears_expiry(fake_github, make_backend):
    one, two = make_backend("org/a"), make_backend("org/b")
    tasks.dispatch_send(pending_dispatch(one, delivery_id="d-1").pk)
    tasks.dispatch_send(pending_dispatch(two, delivery_id="d-1").pk)
    tasks.dispatch_send(pending_dispatch(one, delivery_id="d-2").pk)
    # One installation per owner, as on GitHub: one token for both repos of "org".
    assert len(fake_github.requests_to("POST", r"/app/installations/\d+/access_tokens")) == 1
    assert len(fake_github.requests_to("GET", r"/repos/org/./installation")) == 2
    assert len(fake_github.dispatches()) == 3


def test_a_token_is_never_used_past_its_expiry(fake_github, make_backend):
    fake_github.token_ttl = timedelta(seconds=30)  # inside our safety margin: every send needs a new token
    backend = make_backend("org/a")
    tasks.dispatch_send(pending_dispatch(backend, delivery_id="d-1").pk)
    tasks.dispatch_send(pending_dispatch(backend, delivery_id="d-2").pk)
    assert len(fake_github.requests_to("POST", r"/app/installations/\d+/access_tokens")) == 2
    assert len(fake_github.dispatches()) == 2


def test_a_revoked_token_is_replaced_on_the_next_try(fake_github, make_backend):
    backend = make_backend("org/a")
    tasks.dispatch_send(pending_dispatch(backend, delivery_id="d-1").pk)
    fake_github.tokens.clear()  # GitHub forgot every token it issued
    assert tasks.dispatch_send(pending_dispatch(backend, delivery_id="d-2").pk) == "sent"
    assert len(fake_github.requests_to("POST", r"/app/installations/\d+/access_tokens")) == 2
    assert Dispatch.objects.get(delivery__delivery_id="d-2").attempts == 2


def test_a_fan_out_is_concurrent(fake_github, post_webhook, make_backend):
    for i in range(20):
        make_backend(f"org{i}/backend")
    fake_github.latency = 0.2  # every answer takes this long: one after another, no two arrive closer than that
    response = post_webhook("pull_request", "pull_request.opened.payload")
    assert response.json()["dispatches"] == 20
    arrivals = sorted(r.at for r in fake_github.dispatches())
    assert len(arrivals) == 20
    assert set(Dispatch.objects.values_list("status", flat=True)) == {"sent"}
    in_flight = max(sum(1 for b in arrivals if a <= b < a + fake_github.latency) for a in arrivals)
    assert in_flight > 1  # dispatches were waiting for GitHub at the same time


@pytest.mark.skipif(connection.vendor != "postgresql", reason="counts PostgreSQL's connections (the PostgreSQL lane)")
def test_a_fan_out_has_every_dispatch_in_flight_at_once_on_one_database_connection(
    fake_github, post_webhook, make_backend
):
    for i in range(100):
        make_backend(f"org{i}/backend")
    post_webhook("pull_request", "pull_request.opened.payload", delivery_id="warm-up")  # tokens minted
    fake_github.latency = 1.0
    seen, done = [], threading.Event()
    params = connection.get_connection_params()
    query = "SELECT count(*) - 1 FROM pg_stat_activity WHERE datname = current_database()"
    with psycopg.connect(dbname=params["dbname"], host=params["host"], user=params["user"], autocommit=True) as db:
        before = db.execute(query).fetchone()[0]  # the test's own, and any an earlier test of this worker left open

        def count_connections() -> None:
            while not done.is_set():
                seen.append(db.execute(query).fetchone()[0])
                time.sleep(0.05)

        counter = threading.Thread(target=count_connections)
        counter.start()
        try:
            post_webhook("pull_request", "pull_request.opened.payload", delivery_id="wide")
        finally:
            done.set()
            counter.join()
    arrivals = sorted(r.at for r in fake_github.dispatches() if r.json["client_payload"]["delivery_id"] == "wide")
    assert len(arrivals) == 100
    assert arrivals[-1] - arrivals[0] < fake_github.latency  # every one was sent before the first was answered
    assert max(seen) <= before  # the sending threads hold none
    assert Dispatch.objects.filter(delivery__delivery_id="wide", status="sent").count() == 100


def test_dispatches_reuse_their_connection_to_github(fake_github, make_backend):
    backends = [make_backend(f"org{i}/backend") for i in range(3)]
    for backend in backends:  # installation tokens minted
        tasks.dispatch_send(pending_dispatch(backend, delivery_id="d-1").pk)
    opened = fake_github.connections_opened
    for backend in backends:
        tasks.dispatch_send(pending_dispatch(backend, delivery_id="d-2").pk)
    assert len(fake_github.dispatches()) == 6
    assert fake_github.connections_opened == opened  # the connection of the first dispatch, kept alive


def test_dispatches_not_started_before_the_deadline_are_handed_to_a_new_task(fake_github, make_backend):
    dispatches = [pending_dispatch(make_backend(f"org{i}/backend")) for i in range(3)]
    # The task's deadline has passed: nothing is claimed here; the continuation (run inline by the test's queue)
    # claims and sends each once.
    ids = [d.pk for d in dispatches]
    assert outbox.dispatches_send(dispatch_ids=ids, deadline=time.monotonic()) == {"continued": 3}
    assert sorted(r.path for r in fake_github.dispatches()) == [f"/repos/org{i}/backend/dispatches" for i in range(3)]
    assert set(Dispatch.objects.values_list("status", "attempts")) == {("sent", 1)}


def test_a_retry_that_would_start_after_the_deadline_is_left_to_the_schedule(fake_github, make_backend, settings):
    settings.DISPATCH_RETRY_BASE_SECONDS = settings.DISPATCH_RETRY_MAX_SECONDS = 10.0  # a backoff of 5 to 10 s
    dispatch = pending_dispatch(make_backend("org/a"))
    fake_github.script("POST", "/repos/org/a/dispatches", Reply(502))
    assert outbox.dispatch_send(dispatch_id=dispatch.pk, deadline=time.monotonic() + 2) == "pending"
    dispatch.refresh_from_db()
    assert (dispatch.status, dispatch.attempts) == ("pending", 1)
    assert dispatch.retry_at > timezone.now() + timedelta(seconds=4)
    assert "GitHub 502" in dispatch.last_error


def test_a_missing_app_configuration_fails_the_dispatch_with_the_reason(fake_github, make_backend, settings):
    settings.GITHUB_APP_ID = ""
    dispatch = pending_dispatch(make_backend("org/a"))
    assert tasks.dispatch_send(dispatch.pk) == "failed"
    dispatch.refresh_from_db()
    assert "GITHUB_APP_ID" in dispatch.last_error
