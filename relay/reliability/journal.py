"""The journal: verified webhooks and callbacks that arrived while PostgreSQL could not be reached.

GitHub does not redeliver a failed webhook by itself and the public callback reporter does not retry, so an answer
of 503 while the database is down loses the request. The webhook's signature and the callback's OIDC token verify
without the database; a request that passed them is journaled instead (to Redis when it answers, else to the
intermediate store: ARCHIVE_URL, or TEST_REPORTS_URL's store) and answered 202 ``{"journaled": true}``. The
``relay: replay the journal`` schedule sends each entry through its endpoint again once the database is back, with
every check (the webhook's signature and delivery-id dedupe; the callback's token, checked as of its arrival, the
allowlist, the body and the state machine). Both endpoints are idempotent, so an entry replayed twice (the replay
died before removing it) changes nothing the second time. With Redis and the store both failing, the request is
answered 503 as before: nothing is journaled.
"""

import base64
import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import redis
from django.conf import settings
from django.core.cache import cache
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory
from django.urls import resolve
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac

from ootci import journal_figures
from ootci.broker import redis_failed, redis_resting
from relay.reliability import archive

logger = logging.getLogger(__name__)

# What a request meets when PostgreSQL is down or goes away under it.
DATABASE_DOWN = (OperationalError, InterfaceError)
REDIS_KEY = "ootci:journal"
STORE_PREFIX = "journal"
# The headers each endpoint reads: nothing else of the request is kept.
HEADERS = {
    "webhook": ("X-GitHub-Event", "X-GitHub-Delivery", "X-Hub-Signature-256"),
    "callback": ("Authorization",),
}
PATHS = {"webhook": "/github/webhook", "callback": "/github/callback"}
# Set on a replayed request's META (no client can set a key without the HTTP_ prefix): when it arrived.
REPLAY_META = "ootci.journal.received_at"
REPLAY_BATCH = 500


DEAD_KEY = "ootci:journal:dead"
DEAD_PREFIX = "journal-dead"
LOCK = "ootci:journal:replay"
LOCK_SECONDS = 600  # a replay that died lets go of the journal after this


class JournalUnavailable(Exception):
    """Neither Redis nor the intermediate store took the entry."""


class EntryRefused(ValueError):
    """An entry that will never be replayed: corrupt, unsigned, forged or too old; ``reason`` says which."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _signature(document: dict[str, Any]) -> str:
    text = json.dumps({k: v for k, v in document.items() if k != "sig"}, sort_keys=True)
    key = settings.JOURNAL_KEY or settings.SECRET_KEY
    return salted_hmac("ootci.relay.journal", text, secret=key, algorithm="sha256").hexdigest()


@dataclass(frozen=True)
class Entry:
    id: str
    kind: str
    received_at: datetime
    headers: dict[str, str]
    body: bytes

    def dumps(self) -> bytes:
        document = {
            "id": self.id,
            "kind": self.kind,
            "received_at": self.received_at.isoformat(),
            "headers": self.headers,
            "body": base64.b64encode(self.body).decode(),
        }
        return json.dumps(document | {"sig": _signature(document)}).encode()

    @classmethod
    def loads(cls, data: bytes) -> "Entry":
        """The entry, or EntryRefused: not a journal entry, not signed with our key (forged or altered)."""
        try:
            d = json.loads(data)
            entry = cls(
                d["id"], d["kind"], datetime.fromisoformat(d["received_at"]), d["headers"], base64.b64decode(d["body"])
            )
        except (ValueError, KeyError, TypeError) as e:
            raise EntryRefused(f"not a journal entry ({e.__class__.__name__}: {e})"[:300]) from e
        if entry.kind not in PATHS:
            raise EntryRefused(f"unknown kind {entry.kind!r}")
        if not isinstance(d.get("sig"), str) or not constant_time_compare(d["sig"], _signature(d)):
            raise EntryRefused("its signature does not match: forged, altered, or signed with another key")
        return entry


def journal_write(*, kind: str, request: HttpRequest, body: bytes) -> Entry:
    """Journal a verified request of ``kind`` ("webhook" or "callback"); raises JournalUnavailable."""
    headers = {name: request.headers[name] for name in HEADERS[kind] if name in request.headers}
    entry = Entry(uuid.uuid4().hex, kind, timezone.now(), headers, body)
    if _redis_push(entry):
        return entry
    try:
        stamp = entry.received_at.strftime("%Y%m%dT%H%M%S%f")
        _store().put(f"{STORE_PREFIX}/{stamp}-{entry.id}.json", entry.dumps(), content_type="application/json")
    except Exception as e:
        raise JournalUnavailable(f"neither Redis nor the intermediate store took the entry ({e})") from e
    logger.warning("database unavailable: %s %s journaled to the intermediate store", kind, entry.id)
    return entry


def journal_taken(*, kind: str, request: HttpRequest, body: bytes) -> bool:
    """Journal a verified request whose endpoint found the database down; False (logged) when no store took it or
    when the request is itself a replay (it stays in the journal)."""
    if replayed_at(request) is not None:
        return False
    try:
        journal_write(kind=kind, request=request, body=body)
    except JournalUnavailable as e:
        logger.error("database unavailable and %s", e)
        return False
    return True


def journaled_answer() -> dict[str, Any]:
    return {"ok": True, "journaled": True}


def replayed_at(request: HttpRequest) -> datetime | None:
    """When a replayed request first arrived; None for a request from outside."""
    return request.META.get(REPLAY_META)


def journal_replay() -> dict[str, int]:
    """Send every journaled request through its endpoint again, oldest first; an entry is removed once its endpoint
    answered (2xx, or a 4xx refusal: that is its outcome), kept while the database is still down. One replay at a
    time (a lock in the cache): two schedules never replay one entry twice. An entry that is corrupt, forged or older
    than JOURNAL_MAX_AGE_HOURS goes to the dead letters with its reason, and never blocks the others."""
    counts = {"applied": 0, "refused": 0, "kept": 0, "dead": 0}
    token = uuid.uuid4().hex
    try:
        held = cache.add(LOCK, token, timeout=LOCK_SECONDS)
    except Exception:  # the cache is the database and it is down: nothing can be applied, nothing twice
        held = True
    if not held:
        logger.info("journal replay: another replay holds the journal")
        return counts
    try:
        _replay_all(counts)
    finally:
        _release(token)
        _figures_count()
    return counts


def _replay_all(counts: dict[str, int]) -> None:
    cap = timedelta(hours=settings.JOURNAL_MAX_AGE_HOURS)
    for entry, remove, raw in _entries():
        if isinstance(entry, EntryRefused) or timezone.now() - entry.received_at > cap:
            reason = entry.reason if isinstance(entry, EntryRefused) else f"older than {cap} when replayed"
            _dead_letter(raw, reason)
            remove()
            counts["dead"] += 1
            continue
        try:
            response = _replay(entry)
        except DATABASE_DOWN as e:
            logger.warning("journal replay stopped: the database is still unavailable (%s)", e)
            counts["kept"] += 1
            break
        except Exception:
            # Kept for the next run, and the rest still replayed: one entry that breaks must not block the journal.
            logger.exception("journaled %s %s could not be replayed", entry.kind, entry.id)
            counts["kept"] += 1
            continue
        if response.status_code >= 500:
            counts["kept"] += 1
            continue
        counts["applied" if response.status_code < 400 else "refused"] += 1
        if response.status_code >= 400:
            detail = getattr(response, "data", None) or response.content[:300]
            logger.warning("journaled %s %s refused on replay: %s", entry.kind, entry.id, detail)
        remove()


def _release(token: str) -> None:
    try:
        if cache.get(LOCK) == token:
            cache.delete(LOCK)
    except Exception:
        logger.warning("journal replay: its lock lapses by itself in %d s", LOCK_SECONDS)


def _dead_letter(raw: bytes, reason: str) -> None:
    """Keep a refused entry where an operator can read it, with its reason (Redis, else the store)."""
    letter = json.dumps({"reason": reason, "at": timezone.now().isoformat(), "entry": raw.decode("utf-8", "replace")})
    logger.error("journal entry refused for good: %s", reason)
    if settings.REDIS_URL and not redis_resting(settings.REDIS_URL):
        try:
            _redis().rpush(DEAD_KEY, letter)
            return
        except redis.RedisError:
            pass
    _store().put(f"{DEAD_PREFIX}/{uuid.uuid4().hex}.json", letter.encode(), content_type="application/json")


def _figures_count() -> None:
    """What the journal holds now, for the relay strip (ootci.journal_figures)."""
    waiting = dead = 0
    try:
        if settings.REDIS_URL and not redis_resting(settings.REDIS_URL):
            waiting, dead = _redis().llen(REDIS_KEY), _redis().llen(DEAD_KEY)
        store = _store()
        waiting += len(list(store.listing(f"{STORE_PREFIX}/")))
        dead += len(list(store.listing(f"{DEAD_PREFIX}/")))
        cache.set(journal_figures.KEY, {"waiting": waiting, "dead": dead}, timeout=None)
    except Exception as e:  # figures only: never the replay's failure
        logger.warning("journal figures not counted: %s", e)


def _replay(entry: Entry) -> HttpResponse:
    """The entry's request, as it came, through its endpoint's view (not the middleware: a database error must
    reach journal_replay, not become a 503)."""
    path = PATHS[entry.kind]
    meta = {f"HTTP_{name.upper().replace('-', '_')}": value for name, value in entry.headers.items()}
    meta[REPLAY_META] = entry.received_at
    request = RequestFactory().post(path, data=entry.body, content_type="application/json", **meta)
    return resolve(path).func(request)


def _loaded(data: bytes) -> "Entry | EntryRefused":
    try:
        return Entry.loads(data)
    except EntryRefused as e:
        return e


def _entries():
    """(entry or EntryRefused, remove, raw) triples: those in Redis, then those in the store, each oldest first."""
    if settings.REDIS_URL and not redis_resting(settings.REDIS_URL):
        try:
            raw = _redis().lrange(REDIS_KEY, 0, REPLAY_BATCH - 1)
        except redis.RedisError as e:
            logger.warning("journal replay: Redis unavailable (%s); its entries wait", e)
            raw = []
        for data in raw:
            yield _loaded(data), lambda data=data: _redis().lrem(REDIS_KEY, 1, data), data
    store = _store()
    for key, _ in sorted(store.listing(f"{STORE_PREFIX}/"))[:REPLAY_BATCH]:
        with store.open(key) as f:
            data = f.read()
        yield _loaded(data), lambda key=key: store.delete(key), data


def _redis_push(entry: Entry) -> bool:
    url = settings.REDIS_URL
    if not url or redis_resting(url):
        return False
    try:
        _redis().rpush(REDIS_KEY, entry.dumps())
    except redis.RedisError as e:
        redis_failed(url)
        logger.warning("journal: Redis unavailable (%s); using the intermediate store", e)
        return False
    logger.warning("database unavailable: %s %s journaled to Redis", entry.kind, entry.id)
    return True


def _redis() -> redis.Redis:
    timeout = settings.REDIS_TIMEOUT_SECONDS
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=timeout)


def _store() -> archive.Blobs:
    if settings.ARCHIVE_URL:
        return archive.webhook_archive()
    return archive.reports_store()
