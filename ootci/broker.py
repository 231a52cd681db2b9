"""django-q2's Redis broker with short socket timeouts (settings.REDIS_TIMEOUT_SECONDS).

The stock broker connects with redis-py's defaults, which wait forever: an enqueue on a hanging Redis held a
webhook's answer past GitHub's timeout. Workers block on the queue for less than the read timeout, so an idle
queue is never mistaken for a dead Redis.

A process that saw a Redis fail leaves it alone for REDIS_REST_SECONDS (``redis_resting``), and so does the rate
limiter: with Redis hanging, only the first request of a process in that time waits for the timeout, the others go
on at once (an enqueue fails fast and its work is left to the schedules; the rate limit counts in memory).
"""

import threading
import time

import redis
from django.conf import settings
from django_q.brokers import redis_broker
from django_q.conf import Conf

# A worker's wait for the next task, in seconds: under the read timeout, so an empty queue is not a timeout.
DEQUEUE_BLOCK_SECONDS = 0.5
REDIS_REST_SECONDS = 10.0

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
            raise redis.ConnectionError(f"Redis failed less than {REDIS_REST_SECONDS:g} s ago; not tried")
        try:
            return super().enqueue(task)
        except redis.RedisError:
            redis_failed(Conf.REDIS)
            raise

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
