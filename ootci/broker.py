"""django-q2's Redis broker with short socket timeouts (settings.REDIS_TIMEOUT_SECONDS).

The stock broker connects with redis-py's defaults, which wait forever: an enqueue on a hanging Redis held a
webhook's answer past GitHub's timeout. Workers block on the queue for less than the read timeout, so an idle
queue is never mistaken for a dead Redis.

A process that saw a Redis fail leaves it alone for REDIS_REST_SECONDS (``redis_resting``), and so does the rate
limiter: with Redis hanging, only the first request of a process in that time waits for the timeout, the others go
on at once (the rate limit counts in memory).

A task Redis does not take is not lost: it is kept in the database (``DeferredTask``, ``defer``) and the
``ootci: queue deferred tasks`` schedule queues it again once Redis answers (``deferred_requeue``). An enqueue that
timed out may still have reached Redis, so such a task can run twice, which every task allows.
"""

import hashlib
import json
import logging
import threading
import time
from datetime import timedelta

import redis
from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from django_q.brokers import redis_broker
from django_q.conf import Conf
from django_q.signing import SignedPackage

from ootci.models import DeferredTask

logger = logging.getLogger(__name__)

# A worker's wait for the next task, in seconds: under the read timeout, so an empty queue is not a timeout.
DEQUEUE_BLOCK_SECONDS = 0.5
REDIS_REST_SECONDS = 10.0
CLAIM = timedelta(minutes=5)  # a requeue that died lets its claimed deferred tasks go after this

_resting_until: dict[str, float] = {}
_clients: dict[str, redis.Redis] = {}
_lock = threading.Lock()


def redis_resting(url: str) -> bool:
    """Whether this process saw the Redis at ``url`` fail less than REDIS_REST_SECONDS ago."""
    return time.monotonic() < _resting_until.get(url, 0.0)


def redis_failed(url: str) -> None:
    with _lock:
        _resting_until[url] = time.monotonic() + REDIS_REST_SECONDS


class RedisBroker(redis_broker.Redis):
    def enqueue(self, task):
        if redis_resting(Conf.REDIS):
            return defer(self.list_key, task, f"Redis failed less than {REDIS_REST_SECONDS:g} s ago; not tried")
        try:
            return super().enqueue(task)
        except redis.RedisError as ex:
            redis_failed(Conf.REDIS)
            return defer(self.list_key, task, str(ex))

    def dequeue(self):
        task = self.connection.blpop(self.list_key, DEQUEUE_BLOCK_SECONDS)
        if task:
            return [(None, task[1])]
        return None

    @staticmethod
    def get_connection(list_key: str | None = None) -> redis.Redis:
        # django-q2 builds a broker for every enqueue: one client per process keeps its connections open between them
        # (a callback enqueues up to three tasks; a new connection each cost more than the enqueue). redis-py's pool
        # drops connections inherited across a fork.
        client = _clients.get(Conf.REDIS)
        if client is None:
            timeout = settings.REDIS_TIMEOUT_SECONDS
            client = redis.Redis.from_url(Conf.REDIS, socket_timeout=timeout, socket_connect_timeout=timeout)
            _clients[Conf.REDIS] = client
        return client


def defer(queue: str, task: str, why: str) -> str:
    """Keep ``task`` (a signed package bound for ``queue``) in the database; returns its id, as an enqueue does."""
    package = SignedPackage.loads(task)
    func = (
        package["func"]
        if isinstance(package["func"], str)
        else f"{package['func'].__module__}.{package['func'].__qualname__}"
    )
    call = json.dumps([func, package["args"], package["kwargs"]], default=repr, sort_keys=True)
    DeferredTask.objects.bulk_create(
        [DeferredTask(call=hashlib.sha256(call.encode()).hexdigest(), func=func, queue=queue, payload=task)],
        ignore_conflicts=True,
    )
    logger.warning("task %s kept in the database until Redis answers: %s", func, why)
    return package["id"]


def deferred_requeue(*, batch: int = 500) -> int:
    """Queue every deferred task again, oldest first; returns how many. A Redis failure (RedisError) keeps the rest.

    No transaction or row lock is held across the Redis pipeline: a batch is claimed by a conditional UPDATE, pushed,
    then deleted. Two schedules never push one row twice; one that dies after the push leaves its claim to expire
    (CLAIM), and the task is pushed again (tasks are safe to run twice)."""
    sent = 0
    while True:
        now = timezone.now()
        free = Q(claimed_at__isnull=True) | Q(claimed_at__lt=now - CLAIM)
        ids = list(DeferredTask.objects.filter(free).order_by("id").values_list("pk", flat=True)[:batch])
        if not ids:
            return sent
        DeferredTask.objects.filter(free, pk__in=ids).update(claimed_at=now)
        rows = list(DeferredTask.objects.filter(pk__in=ids, claimed_at=now).order_by("id"))
        if not rows:
            continue  # another schedule claimed this batch first
        pipe = RedisBroker.get_connection().pipeline(transaction=False)
        for row in rows:
            pipe.rpush(row.queue, row.payload)
        try:
            pipe.execute()
        except redis.RedisError:
            DeferredTask.objects.filter(pk__in=[row.pk for row in rows], claimed_at=now).update(claimed_at=None)
            raise
        DeferredTask.objects.filter(pk__in=[row.pk for row in rows], claimed_at=now).delete()
        sent += len(rows)
