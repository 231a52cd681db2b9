"""A GitHub outage longer than a task's retries: dispatches wait with ``retry_at`` and the stale-dispatch schedule
tries them again, for DISPATCH_RETRY_WINDOW_HOURS, against the fake GitHub over HTTP.

The clock is moved by moving the rows back in time (``time_passes``): every timestamp the outbox reads is on them.
"""

from collections import Counter
from datetime import timedelta

import pytest
from django.db.models import F

from ootci.models import Dispatch
from relay import tasks
from tests.fakes.github import Reply

pytestmark = pytest.mark.django_db(transaction=True)


def time_passes(delta: timedelta) -> None:
    """What the outbox sees when ``delta`` has gone by: every stamp it compares with now is that much older."""
    Dispatch.objects.update(
        created_at=F("created_at") - delta, updated_at=F("updated_at") - delta, retry_at=F("retry_at") - delta
    )


def schedule_runs_for(duration: timedelta, *, every: timedelta = timedelta(minutes=1)) -> None:
    """The ``relay: resend stale dispatches`` schedule, once a minute (or ``every``) for ``duration``."""
    for _ in range(int(duration / every)):
        time_passes(every)
        tasks.dispatches_resend_stale()


def sent_per_dispatch(fake_github) -> Counter:
    return Counter((r.path, r.json["client_payload"]["delivery_id"]) for r in fake_github.dispatches())


@pytest.fixture
def outage(fake_github, post_webhook, make_backend):
    """GitHub answering 502 to everything while 3 webhooks fan out to 2 backends each."""
    make_backend("org/a")
    make_backend("org/b")
    fake_github.outage = Reply(502, {"message": "Server Error"})
    for n in range(3):
        assert post_webhook("pull_request", "pull_request.opened.payload", delivery_id=f"d-{n}").status_code == 202
    return fake_github


def test_a_round_of_5xx_leaves_the_dispatch_waiting_not_failed(outage, settings):
    assert set(Dispatch.objects.values_list("status", "attempts")) == {("pending", settings.DISPATCH_MAX_ATTEMPTS)}
    assert all(d.retry_at is not None and "GitHub 502" in d.last_error for d in Dispatch.objects.all())


def test_an_outage_longer_than_the_old_retry_budget_loses_nothing_and_sends_each_once(outage):
    schedule_runs_for(timedelta(hours=2))
    assert set(Dispatch.objects.values_list("status", flat=True)) == {"pending"}
    tries_during_outage = Dispatch.objects.get(backend__repo="org/a", delivery__delivery_id="d-0").attempts
    # Capped exponential backoff: a try every 30 min at most, not one a minute.
    assert tries_during_outage <= 5 + 12
    outage.outage = None  # GitHub is back
    schedule_runs_for(timedelta(minutes=31))  # DISPATCH_RETRY_LATER_MAX_SECONDS: no wait is longer
    assert set(Dispatch.objects.values_list("status", flat=True)) == {"sent"}
    assert set(Dispatch.objects.values_list("retry_at", flat=True)) == {None}
    sent = sent_per_dispatch(outage)
    assert len(sent) == 6 and set(sent.values()) == {1}
    schedule_runs_for(timedelta(hours=1))
    assert sent_per_dispatch(outage) == sent  # nothing sent again


def test_an_outage_longer_than_the_window_fails_with_the_reason(outage, settings):
    settings.DISPATCH_RETRY_WINDOW_HOURS = 1
    schedule_runs_for(timedelta(minutes=59))
    assert set(Dispatch.objects.values_list("status", flat=True)) == {"pending"}
    schedule_runs_for(timedelta(minutes=2))
    assert set(Dispatch.objects.values_list("status", flat=True)) == {"failed"}
    for dispatch in Dispatch.objects.all():
        assert dispatch.last_error.startswith("GitHub 502 on ")
        assert dispatch.last_error.endswith("(retried for 1 h)")
        assert dispatch.retry_at is None


def test_a_422_during_the_retries_fails_at_once(outage):
    schedule_runs_for(timedelta(minutes=5))
    outage.outage = Reply(422, {"message": "Invalid request: no workflow"})
    Dispatch.objects.update(retry_at=F("updated_at") + timedelta(seconds=1))
    schedule_runs_for(timedelta(seconds=2), every=timedelta(seconds=2))
    assert set(Dispatch.objects.values_list("status", flat=True)) == {"failed"}
    assert Dispatch.objects.filter(last_error__contains="GitHub 422").count() == 6


def test_a_due_retry_is_claimed_by_one_worker(outage):
    dispatch = Dispatch.objects.get(backend__repo="org/a", delivery__delivery_id="d-0")
    outage.outage = None
    Dispatch.objects.filter(pk=dispatch.pk).update(retry_at=F("updated_at") + timedelta(seconds=1))
    time_passes(timedelta(seconds=2))
    assert tasks.dispatch_send(dispatch.pk) == "sent"
    assert tasks.dispatch_send(dispatch.pk) == "skipped"
    assert len(outage.dispatches()) == 1


def test_a_waiting_dispatch_is_not_taken_before_its_time(outage):
    dispatch = Dispatch.objects.first()
    outage.outage = None
    Dispatch.objects.update(retry_at=F("updated_at") + timedelta(hours=1))
    time_passes(timedelta(minutes=5))  # untouched for longer than DISPATCH_STALE_SECONDS, yet not abandoned
    assert tasks.dispatch_send(dispatch.pk) == "skipped"
    assert tasks.dispatches_resend_stale() == {}
    assert not outage.dispatches()
