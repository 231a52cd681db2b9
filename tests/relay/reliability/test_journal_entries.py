"""The journal's entries (relay.reliability.journal): signed, refused on replay to the dead letters when forged,
corrupt or too old — without blocking the others —, replayed exactly once however many replays run at once, and
counted on the relay strip. Real Redis (this worker's database), the test database up."""

import json
import threading
import uuid
from datetime import timedelta

import pytest
import redis
from django.db import connection
from django.utils import timezone

from ootci.journal_figures import journal_figures
from ootci.models import Delivery
from relay.reliability import journal
from tests.relay.conftest import fixture_json, sign

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def journaled(settings, monkeypatch, tmp_path):
    """A journal of this test's own keys in this worker's Redis; returns a function that journals a webhook."""
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    settings.ARCHIVE_URL = ""
    settings.GITHUB_WEBHOOK_SECRET = "journal-secret"
    suffix = uuid.uuid4().hex[:8]
    monkeypatch.setattr(journal, "REDIS_KEY", f"ootci:journal:{suffix}")
    monkeypatch.setattr(journal, "DEAD_KEY", f"ootci:journal:dead:{suffix}")
    monkeypatch.setattr(journal, "LOCK", f"ootci:journal:replay:{suffix}")
    client = redis.Redis.from_url(settings.REDIS_URL)

    def webhook(*, delivery_id: str, age: timedelta = timedelta(0)) -> journal.Entry:
        body = json.dumps(fixture_json("ping.payload")).encode()
        headers = {
            "X-GitHub-Event": "ping",
            "X-GitHub-Delivery": delivery_id,
            "X-Hub-Signature-256": sign(body, settings.GITHUB_WEBHOOK_SECRET),
        }
        entry = journal.Entry(delivery_id, "webhook", timezone.now() - age, headers, body)
        client.rpush(journal.REDIS_KEY, entry.dumps())
        return entry

    webhook.redis = client
    yield webhook
    client.delete(journal.REDIS_KEY, journal.DEAD_KEY, journal.LOCK)


def dead_letters(journaled) -> list[dict]:
    return [json.loads(raw) for raw in journaled.redis.lrange(journal.DEAD_KEY, 0, -1)]


def test_a_forged_a_corrupt_and_a_stale_entry_go_to_the_dead_letters_and_block_nothing(journaled, settings):
    journaled(delivery_id="good-1")
    forged = json.loads(journal.Entry("x", "webhook", timezone.now(), {}, b"{}").dumps())
    forged["body"] = "eyJhY3Rpb24iOiAiZm9yZ2VkIn0="  # altered after signing
    journaled.redis.rpush(journal.REDIS_KEY, json.dumps(forged))
    journaled.redis.rpush(journal.REDIS_KEY, b"\x00not json")
    journaled(delivery_id="too-old", age=timedelta(hours=settings.JOURNAL_MAX_AGE_HOURS + 1))
    journaled(delivery_id="good-2")

    counts = journal.journal_replay()

    assert counts == {"applied": 2, "refused": 0, "kept": 0, "dead": 3}
    reasons = [letter["reason"] for letter in dead_letters(journaled)]
    assert reasons[0] == "its signature does not match: forged, altered, or signed with another key"
    assert reasons[1].startswith("not a journal entry") and reasons[2].startswith("older than 3 days")
    assert journaled.redis.llen(journal.REDIS_KEY) == 0
    assert journal_figures() == (0, 3)


def test_an_entry_signed_with_another_key_is_refused(journaled, settings):
    journaled(delivery_id="signed-before-the-key-changed")
    settings.JOURNAL_KEY = "a-new-key"

    assert journal.journal_replay()["dead"] == 1


def test_two_replays_at_once_replay_each_entry_once(journaled):
    for n in range(20):
        journaled(delivery_id=f"p-{n}")
    results, go = [], threading.Barrier(2)

    def replay():
        go.wait()
        try:
            results.append(journal.journal_replay())
        finally:
            connection.close()

    threads = [threading.Thread(target=replay) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sum(r["applied"] for r in results) == 20 and sum(r["refused"] for r in results) == 0
    assert journaled.redis.llen(journal.REDIS_KEY) == 0


def test_the_relay_strip_shows_the_journal(client, journaled, make_backend):
    make_backend("acme/npu", "L2")
    journaled.redis.rpush(journal.REDIS_KEY, b"corrupt")
    journal.journal_replay()

    assert "data-journal" in client.get("/oot/").content.decode()
    assert not Delivery.objects.exists()  # a ping writes no delivery row
