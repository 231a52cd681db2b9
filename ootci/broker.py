"""django-q2's Redis broker with short socket timeouts (settings.REDIS_TIMEOUT_SECONDS).

The stock broker connects with redis-py's defaults, which wait forever: an enqueue on a hanging Redis held a
webhook's answer past GitHub's timeout. Workers block on the queue for less than the read timeout, so an idle
queue is never mistaken for a dead Redis.
"""

import redis
from django.conf import settings
from django_q.brokers import redis_broker
from django_q.conf import Conf

# A worker's wait for the next task, in seconds: under the read timeout, so an empty queue is not a timeout.
DEQUEUE_BLOCK_SECONDS = 0.5


class RedisBroker(redis_broker.Redis):
    def dequeue(self):
        task = self.connection.blpop(self.list_key, DEQUEUE_BLOCK_SECONDS)
        if task:
            return [(None, task[1])]
        return None

    @staticmethod
    def get_connection(list_key: str | None = None) -> redis.Redis:
        timeout = settings.REDIS_TIMEOUT_SECONDS
        return redis.Redis.from_url(Conf.REDIS, socket_timeout=timeout, socket_connect_timeout=timeout)
