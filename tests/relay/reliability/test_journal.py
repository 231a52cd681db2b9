"""PostgreSQL down: verified webhooks and callbacks are journaled, answered 202, and applied by the replay once it is
back. Real parts: a PostgreSQL cluster of this module's own (initdb, pg_ctl) that the tests stop and start, Redis,
the intermediate store in a folder, the fake GitHub and OIDC issuer over HTTP.
"""

import json
import os
import uuid
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.utils import timezone

from ootci.models import Backend, BuildkitePipeline, CallbackRejection, Delivery, Dispatch, JobResult
from relay import tasks
from relay.reliability import journal
from tests.fakes.oidc import Downstream
from tests.relay.conftest import fixture_bytes, sign
from tests.servers import PostgresCluster

WEBHOOKS = 5


@pytest.fixture(scope="module")
def cluster(django_db_blocker):
    """A migrated database on a throwaway cluster; the default connection points at it for the module."""
    server = PostgresCluster().start()
    server.create_database("journal")
    connection = connections["default"]
    saved = {k: connection.settings_dict[k] for k in ("HOST", "PORT", "NAME")}
    with django_db_blocker.unblock():
        connection.close()
        connection.settings_dict.update(HOST="127.0.0.1", PORT=str(server.port), NAME="journal")
        call_command("migrate", verbosity=0)
        connection.close()
        try:
            yield server
        finally:
            connection.close()
            connection.settings_dict.update(saved)
            server.remove()


@pytest.fixture
def database(cluster, django_db_blocker, settings, tmp_path, fake_github, oidc_issuer):
    """Fresh rows on the cluster, an empty journal in Redis and in the store (a folder of this test's own)."""
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    settings.ARCHIVE_URL = ""
    settings.UPSTREAM_REPO = "Codertocat/Hello-World"
    with django_db_blocker.unblock():
        for model in (JobResult, Dispatch, Delivery, Backend, CallbackRejection):
            model.objects.all().delete()
        backends = [Backend.objects.create(repo=repo, level="L2") for repo in ("org/a", "org/b")]
        _redis().delete(journal.REDIS_KEY)
        yield backends
        _redis().delete(journal.REDIS_KEY)
        if not (cluster.data / "postmaster.pid").exists():
            database_starts(cluster)  # a test that failed half-way left it stopped


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["REDIS_URL"])  # the test Redis, even while a test unsets REDIS_URL


def database_stops(cluster) -> None:
    connections.close_all()
    cluster.stop()


def database_starts(cluster) -> None:
    cluster.start()
    connections.close_all()


def webhook(client, delivery_id: str, *, secret: str | None = None):
    body = fixture_bytes("pull_request.opened.payload")
    headers = {
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": delivery_id,
        "X-Hub-Signature-256": sign(body, secret or settings.GITHUB_WEBHOOK_SECRET),
    }
    return client.post("/github/webhook", data=body, content_type="application/json", headers=headers)


def callback(client, ci: Downstream, body: dict, *, token: str | None = None):
    token = token or ci.issuer.token(repository=ci.repo)
    headers = {"Authorization": f"Bearer {token}"}
    return client.post("/github/callback", data=json.dumps(body), content_type="application/json", headers=headers)


def outage_traffic(client, cluster, ci, dispatch) -> list:
    """While the database is down: webhooks for both backends, and the job's in_progress then completed reports."""
    database_stops(cluster)
    answers = [webhook(client, f"j-{n}") for n in range(WEBHOOKS)]
    answers += [
        callback(client, ci, ci.body(name, dispatch))
        for name in ("pull_request.in_progress", "pull_request.completed.failure")
    ]
    return answers


def state() -> tuple:
    return (
        sorted(Delivery.objects.values_list("delivery_id", flat=True)),
        sorted(Dispatch.objects.values_list("delivery__delivery_id", "backend__repo", "status", "attempts")),
        list(JobResult.objects.values_list("status", "conclusion", "updated_at")),
        CallbackRejection.objects.count(),
    )


@pytest.mark.parametrize("store", ["redis", "intermediate store"])
def test_verified_requests_of_an_outage_are_journaled_and_applied_once_it_is_over(
    client, cluster, database, oidc_issuer, fake_github, settings, django_db_blocker, store
):
    if store == "intermediate store":
        settings.REDIS_URL = ""  # no Redis to journal to: the folder it is
    with django_db_blocker.unblock():
        ci = Downstream("", oidc_issuer, database[0])
        dispatch = ci.dispatch()

        answers = outage_traffic(client, cluster, ci, dispatch)

        assert [a.status_code for a in answers] == [202] * (WEBHOOKS + 2), answers[-1].content
        assert all(a.json()["journaled"] is True for a in answers)
        stored = (
            _redis().llen(journal.REDIS_KEY) if store == "redis" else len(list(journal._store().listing("journal/")))
        )
        assert stored == WEBHOOKS + 2
        assert tasks.journal_replay() == {"applied": 0, "refused": 0, "kept": 1, "dead": 0}  # still down: nothing lost
        database_starts(cluster)

        assert tasks.journal_replay() == {"applied": WEBHOOKS + 2, "refused": 0, "kept": 0, "dead": 0}

        assert sorted(Delivery.objects.values_list("delivery_id", flat=True)) == sorted(
            {f"j-{n}" for n in range(WEBHOOKS)} | {dispatch.delivery.delivery_id}
        )
        assert set(
            Dispatch.objects.filter(delivery__delivery_id__startswith="j-").values_list("status", flat=True)
        ) == {"sent"}
        assert len(fake_github.dispatches()) == 2 * WEBHOOKS
        job = JobResult.objects.get()
        assert (job.status, job.conclusion, job.one_shot) == ("completed", "failure", False)
        assert tasks.journal_replay() == {"applied": 0, "refused": 0, "kept": 0, "dead": 0}


def test_a_replay_after_a_partial_success_changes_nothing(
    client, cluster, database, oidc_issuer, fake_github, django_db_blocker
):
    with django_db_blocker.unblock():
        ci = Downstream("", oidc_issuer, database[0])
        dispatch = ci.dispatch()
        outage_traffic(client, cluster, ci, dispatch)
        entries = _redis().lrange(journal.REDIS_KEY, 0, -1)
        database_starts(cluster)
        tasks.journal_replay()
        before = state()

        # Replays that died before removing what they had applied: every webhook, the job's last report. (Its
        # in_progress again after the completed would be refused 409, as a late retry from the job is.)
        _redis().rpush(journal.REDIS_KEY, *entries[:WEBHOOKS], entries[-1])
        assert tasks.journal_replay() == {"applied": WEBHOOKS + 1, "refused": 0, "kept": 0, "dead": 0}

        assert state() == before
        assert len(fake_github.dispatches()) == 2 * WEBHOOKS


def test_the_replay_checks_everything_again(client, cluster, database, oidc_issuer, settings, django_db_blocker):
    with django_db_blocker.unblock():
        ci = Downstream("", oidc_issuer, database[0])
        dispatch = ci.dispatch()
        not_allowed = Downstream("", oidc_issuer, Backend(repo="evil/fork", level="L2"))
        database_stops(cluster)
        assert callback(client, not_allowed, not_allowed.body("pull_request.in_progress", dispatch)).status_code == 202
        assert callback(client, ci, ci.body("pull_request.in_progress", dispatch)).status_code == 202
        database_starts(cluster)
        Backend.objects.filter(repo="org/a").update(enabled=False)  # disabled meanwhile: refused on replay

        assert tasks.journal_replay() == {"applied": 0, "refused": 2, "kept": 0, "dead": 0}

        assert not JobResult.objects.exists()
        assert sorted(CallbackRejection.objects.values_list("repo", "status_code")) == [
            ("evil/fork", 403),
            ("org/a", 403),
        ]


def test_unverified_requests_are_refused_without_the_database(
    client, cluster, database, oidc_issuer, django_db_blocker
):
    with django_db_blocker.unblock():
        ci = Downstream("", oidc_issuer, database[0])
        dispatch = ci.dispatch()
        database_stops(cluster)

        bad_signature = webhook(client, "j-bad", secret="not-ours")
        bad_token = callback(client, ci, ci.body("pull_request.in_progress", dispatch), token="not.a.jwt")

        assert (bad_signature.status_code, bad_token.status_code) == (401, 401)
        assert _redis().llen(journal.REDIS_KEY) == 0


@pytest.mark.parametrize(("arrived_ago", "answer"), [(3590, "applied"), (60, "refused")])
def test_a_token_is_checked_as_of_the_callbacks_arrival(
    cluster, database, oidc_issuer, django_db_blocker, arrived_ago, answer
):
    with django_db_blocker.unblock():
        ci = Downstream("", oidc_issuer, database[0])
        dispatch = ci.dispatch()
        # Minted an hour ago, valid for 5 minutes: expired long before the replay, not when it arrived 3590 s ago.
        token = oidc_issuer.token(repository=ci.repo, issued_ago=3600, expires_in=300)
        body = json.dumps(ci.body("pull_request.in_progress", dispatch)).encode()
        arrived = timezone.now() - timedelta(seconds=arrived_ago)
        entry = journal.Entry(uuid.uuid4().hex, "callback", arrived, {"Authorization": f"Bearer {token}"}, body)
        _redis().rpush(journal.REDIS_KEY, entry.dumps())

        assert tasks.journal_replay()[answer] == 1

        assert JobResult.objects.exists() == (answer == "applied")


def test_a_buildkite_callback_in_an_outage_is_journaled_by_the_pipeline_map_read_before_it(
    client, cluster, database, oidc_issuer, buildkite, fake_github, settings, django_db_blocker
):
    settings.OIDC_IDENTITY_MAP_SECONDS = 0  # read the map at every token: the outage's read fails, the last one stays
    with django_db_blocker.unblock():
        backend = database[0]
        job = buildkite.job()
        BuildkitePipeline.objects.create(
            backend=backend, organization_id=job.organization_id, pipeline_id=job.pipeline_id
        )
        ci = Downstream("", oidc_issuer, backend)
        dispatch = ci.dispatch()
        token = buildkite.token(job=job)
        started = callback(client, ci, ci.body("pull_request.in_progress", dispatch), token=token)
        assert started.status_code == 200, started.content

        database_stops(cluster)
        finished = callback(client, ci, ci.body("pull_request.completed.failure", dispatch), token=token)
        assert finished.status_code == 202 and finished.json()["journaled"] is True, finished.content

        database_starts(cluster)
        assert tasks.journal_replay() == {"applied": 1, "refused": 0, "kept": 0, "dead": 0}
        assert JobResult.objects.values_list("status", "conclusion").get() == ("completed", "failure")
