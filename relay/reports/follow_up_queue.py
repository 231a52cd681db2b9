"""The follow-ups of successful jobs, taken in bulk: one task follows up a burst of them.

django-q2 hands every task from its pusher to a worker to its monitor, three processes and two pickles: for a success
that waits for its run and trips no alert rule, that hand-over was about half the worker's CPU per completed callback
(py-spy on tests/bench/bench_callback.py). A callback that completed a job successfully pushes the job's id on a Redis
list (``follow_up_queue``) and queues the task that takes the list (``relay.tasks.job_follow_ups``) unless one is
queued or running (its pending mark): the jobs that complete meanwhile leave their follow-up to it, as
``relay.alerts.incidents.once_for_burst`` does for the alert rules. The running task lingers on an empty list
(``FOLLOW_UPS_LINGER_SECONDS``) before it takes its mark away and ends: in a burst of 300 successes a second, a task
every three jobs, when the mark went as a task started, became one for the burst.

The task (``relay.reports.follow_up.follow_ups_take``) takes the list a chunk at a time: it reads a chunk, follows each
job up (``job_followed_up``, its jobs read twenty at a time), then takes the chunk off the list, so a worker killed
within a chunk leaves it to the next task (a follow-up is safe to run twice). One task takes the list at a time (a lock
that expires with django-q2's task timeout, as does the mark while a task holds the lock); a task that finds the lock
taken leaves the list to its holder, which looks at the list again after taking its mark away and letting the lock go. A
task stops at half the task timeout and queues its continuation. A follow-up that raises is queued as a task of its own,
where it fails as it did before, in django-q2's failures. The sweeper queues the task for a list that nothing is taking
(``relay.reports.follow_up.follow_ups_resume``).

A failed, cancelled or timed-out job is still followed up by a task of its own: its follow-up waits on GitHub twice
and classifies its log (about 20 ms of CPU against the hand-over's 1), and the workers take those side by side. So
is every follow-up without Redis (the embedded default's ORM broker) or while Redis fails (the broker keeps the task
in the database until Redis answers).
"""

import logging

import redis
from django.conf import settings
from django_q.conf import Conf
from django_q.tasks import async_task

from ootci.broker import RedisBroker, redis_failed, redis_resting

logger = logging.getLogger(__name__)

PENDING_SECONDS = 300  # a task lost before it started holds the list back for this long (then the next job queues one)


def follow_up_queue(job_id: int, *, conclusion: str) -> None:
    """On commit of a callback that completed ``job_id``: a success's follow-up in the next bulk task, any other's
    in a task of its own."""
    if conclusion != "success" or not settings.REDIS_URL or redis_resting(Conf.REDIS):
        follow_up_alone(job_id)
        return
    ids, pending, _ = keys()
    try:
        pipe = RedisBroker.get_connection().pipeline(transaction=False)
        pipe.rpush(ids, job_id)
        pipe.set(pending, 1, nx=True, ex=PENDING_SECONDS)
        _, unqueued = pipe.execute()
    except redis.RedisError as e:  # a task of its own, which the broker keeps in the database while Redis fails
        redis_failed(Conf.REDIS)
        logger.warning("job %s: follow-up not put on the bulk list (%s): queued alone", job_id, e)
        follow_up_alone(job_id)
        return
    if unqueued:
        async_task("relay.tasks.job_follow_ups", save=False)


def follow_up_alone(job_id: int) -> None:
    async_task("relay.tasks.job_completed", job_id, save=False)


def keys() -> tuple[str, str, str]:
    base = f"ootci:{Conf.PREFIX}:follow-ups"
    return base, f"{base}:pending", f"{base}:lock"
