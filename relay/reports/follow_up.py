"""What a callback that completed a job starts, run by the task worker: ``relay.tasks.job_completed`` for a job that
did not succeed, the bulk task ``relay.tasks.job_follow_ups`` for a burst of successes (relay.reports.follow_up_queue).
"""

import logging
import re
import time
import uuid
from datetime import timedelta

import redis
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import Schedule
from django_q.tasks import async_task, schedule

from ootci.broker import RedisBroker
from ootci.models import BISECT_EVENT, Backend, JobFailure, JobResult
from ootci.rows import columns, related_columns, rows_as
from relay.alerts import fire, incidents
from relay.github import client as github
from relay.reports import artifacts, follow_up_queue, logs, pull
from relay.reports.follow_up_queue import PENDING_SECONDS

logger = logging.getLogger(__name__)

BULK_CHUNK = 100  # ids read, followed up, then taken off the list together
READ_TOGETHER = 20  # of a chunk's jobs, read in one statement (a fixed count: one prepared statement)
LINGER_POLL_SECONDS = 0.02  # how often a lingering bulk task looks at the list
BULK_TIMEOUT_SECONDS = 120  # the lock's life and twice the task's, when Q_CLUSTER sets no task timeout
# Compare-and-delete: a task lets go of the lock only if it still holds it (not once it expired and another took it).
RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
GITHUB_RUN_ID = re.compile(r"^[0-9]{1,20}$")
# The task's reads written out, mapped as raw() maps them (ootci.rows): compiling the ORM's select_related read of
# the job, its backend and its failure took a quarter of this task's CPU (py-spy, tests/bench/bench_callback.py).
# ``run_running``: whether another job of its run attempt is still in progress (by the unique attempt index).
JOB = (
    f"SELECT {columns(JobResult, 'job')}, {related_columns(Backend, 'backend')},"
    f" {related_columns(JobFailure, 'failure')},"
    f" EXISTS (SELECT 1 FROM {JobResult._meta.db_table} run WHERE run.backend_id = job.backend_id"
    " AND run.delivery_id = job.delivery_id AND run.workflow_name = job.workflow_name AND run.run_id = job.run_id"
    f" AND run.run_attempt = job.run_attempt AND run.status <> '{JobResult.Status.COMPLETED}' AND run.id <> job.id)"
    " AS run_running"
    f" FROM {JobResult._meta.db_table} job JOIN {Backend._meta.db_table} backend ON backend.id = job.backend_id"
    f" LEFT JOIN {JobFailure._meta.db_table} failure ON failure.job_id = job.id WHERE job.id = %s"
)
JOBS = JOB.replace("WHERE job.id = %s", f"WHERE job.id IN ({', '.join(['%s'] * READ_TOGETHER)})")


def job_completed_follow_up(*, job_id: int) -> str:
    """What a callback that completed a job starts, run by the task worker: the request queues this one task, not
    one per kind of work (each costs the request about a millisecond)."""
    job = job_read(job_id)
    return "missing" if job is None else job_followed_up(job)


def job_followed_up(job: JobResult, *, fires: dict[str, bool] | None = None) -> str:
    """Its test reports are pulled (queued, when a GitHub Actions run has an artifact for it), a failed job's log is
    classified, and the alert rules it bears on are evaluated, both here: the rules then see the log's verdict, once.
    ``job``: read by ``job_read`` (its classification, if any, with it); ``fires``: as ``job_alerts_evaluate``."""
    job_reports_pull_wanted(job)
    if logs.job_log_wanted(job):
        job_log_classified(job)
    if job.event_type == BISECT_EVENT:  # a bisection step that ended without a report to come is inconclusive
        transaction.on_commit(lambda: async_task("relay.tasks.bisect_step_ended", job.pk), robust=True)
    return incidents.job_alerts_evaluate(job_id=job.pk, job=job, fires=fires)


def job_read(job_id: int) -> JobResult | None:
    """The job with its backend and its classification so far, in one statement (as select_related reads them:
    ``job.failure`` raises when it has none)."""
    found = rows_as(JobResult, JOB, [job_id], related=("backend", "failure"))
    return found[0] if found else None


def jobs_read(job_ids: list[int]) -> dict[int, JobResult]:
    """``job_read`` of up to ``READ_TOGETHER`` jobs in one statement, by id (a missing one is not there)."""
    padded = [*job_ids, *[job_ids[0]] * (READ_TOGETHER - len(job_ids))]
    return {job.pk: job for job in rows_as(JobResult, JOBS, padded, related=("backend", "failure"))}


def job_reports_pull_wanted(job: JobResult, *, attempt: int = 0) -> str:
    """After a new completed callback of a GitHub Actions job (numeric run id): queue the pull of its reports when
    its run has an artifact of it not pulled yet, and, when it is the last job of its run attempt to complete, of
    the successful jobs that waited for it (one listing for all, ``relay.reports.artifacts``). When GitHub cannot
    say, ``run_reports_pull`` asks again (``attempt``: that task's, 0 in the follow-up)."""
    if job.status != JobResult.Status.COMPLETED or not GITHUB_RUN_ID.match(job.run_id):
        return "not a GitHub Actions job"
    if job.run_running and artifacts.job_defers_listing(job):
        return "waits for its run"
    jobs = [job] if job.run_running else artifacts.run_jobs_to_list(job)
    if not jobs:
        return "pulled with its run"
    try:
        wanted = artifacts.reports_to_pull(jobs)
    except github.GitHubError as e:
        if attempt == 0 or (e.retryable and attempt < pull.PULL_ATTEMPTS):
            logger.info("job %s: run artifacts not listed (%s): asked again", job.pk, e)
            wait = getattr(e, "wait_seconds", pull.PULL_RETRY_SECONDS * attempt)
            transaction.on_commit(lambda: _run_reports_pull_queue(job.pk, attempt + 1, wait), robust=True)
        return "not listed"
    if not job.run_running:
        artifacts.run_listed(jobs)
    for found, items in wanted.items():
        # Not kept in django-q2's results when it succeeds (save=False): at one per completed job, pruning that
        # table (a locking read of up to Q_CLUSTER["save_limit"] rows per task) cost more than the pull's statements.
        transaction.on_commit(
            lambda pk=found.pk, items=items: async_task("relay.tasks.job_reports_pull", pk, 1, items, save=False),
            robust=True,
        )
    return f"{len(wanted)} of {len(jobs)} to pull"


def run_reports_pull(*, job_id: int, attempt: int = 1) -> str:
    """``job_reports_pull_wanted`` again, for a job whose run GitHub could not list, or that the sweeper timed out
    (it may end its run attempt: the jobs that waited for it are pulled)."""
    job = job_read(job_id)
    return "missing" if job is None else job_reports_pull_wanted(job, attempt=attempt)


def _run_reports_pull_queue(job_id: int, attempt: int, wait: float) -> None:
    if attempt == 1:  # from the follow-up: at once, as the pull itself was
        async_task("relay.tasks.run_reports_pull", job_id, attempt)
        return
    schedule(
        "relay.tasks.run_reports_pull",
        job_id,
        attempt,
        schedule_type=Schedule.ONCE,
        next_run=timezone.now() + timedelta(seconds=wait),
    )


def job_log_classified(job: JobResult) -> None:
    """Classify a failed job's log in this task rather than in one of its own: a task costs the worker about as
    much CPU as the classification (its package signed and pickled, queued, taken, a connection checked), and this
    one always followed. The callback was answered before, so its answer still never waits for GitHub. When it fails
    the task is queued to try again, and the alert rules are evaluated meanwhile (the task's verdict brings a PR's
    along)."""
    try:
        logs.job_log_classify(job_id=job.pk, job=job, alerts_queued=False)
        return
    except github.GitHubError as e:  # GitHub unreachable, or a 5xx: worth another try
        logger.info("job %s: log not classified (%s): the task tries again", job.pk, e)
    except Exception:
        logger.exception("job %s: log not classified: the task tries again", job.pk)
    transaction.on_commit(lambda: async_task("relay.tasks.job_log_classify", job.pk), robust=True)


# --- the bulk task of successful jobs (relay.reports.follow_up_queue) ---------------------------------------------


def follow_ups_take() -> dict[str, int]:
    """The bulk task (relay.reports.follow_up_queue): follow up every job on the list, a chunk at a time, while it
    holds the list's lock. Its pending mark stays while it runs, so the jobs that complete meanwhile leave their
    follow-up to it, and it lingers ``FOLLOW_UPS_LINGER_SECONDS`` on an empty list before it ends: a burst's
    follow-ups are one task, not one every few jobs (each hand-over cost the worker about a millisecond)."""
    client = RedisBroker.get_connection()
    ids, pending, lock = follow_up_queue.keys()
    timeout = Conf.TIMEOUT or BULK_TIMEOUT_SECONDS  # django-q2 allows none
    deadline = time.monotonic() + timeout / 2
    linger = 0.0 if Conf.SYNC else settings.FOLLOW_UPS_LINGER_SECONDS  # inline, a task would hold its request
    done = 0
    while True:
        token = uuid.uuid4().hex
        if not client.set(lock, token, nx=True, px=max(1, int(timeout * 1000))):
            return {"followed_up": done, "left_to_the_lock_holder": 1}
        client.set(pending, 1, ex=max(1, int(timeout)))  # running: a job completing now leaves its follow-up to it
        late = False
        try:
            while not late and (chunk := client.lrange(ids, 0, BULK_CHUNK - 1) or _arrived(client, ids, linger)):
                taken, late = _chunk_followed_up([int(raw) for raw in chunk], deadline)
                client.ltrim(ids, taken, -1)
                done += taken
        finally:
            if not late:
                client.delete(pending)  # a job completing from now on queues another task
            client.eval(RELEASE, 1, lock, token)
        if late:  # queued once the lock is free for it to take; the mark stays for it
            async_task("relay.tasks.job_follow_ups", save=False)
            return {"followed_up": done, "continued": 1}
        if not client.llen(ids):  # ids pushed after the last look, while the mark was still there
            return {"followed_up": done}


def _arrived(client: redis.Redis, ids: str, linger: float) -> list[bytes]:
    """The list's first chunk once ids arrive within ``linger`` seconds, else []."""
    until = time.monotonic() + linger
    while time.monotonic() < until:
        time.sleep(min(LINGER_POLL_SECONDS, max(0.0, until - time.monotonic())))
        if chunk := client.lrange(ids, 0, BULK_CHUNK - 1):
            return chunk
    return []


def follow_ups_resume() -> int:
    """For the sweeper: queue the bulk task when the list has ids that no task is queued or running for (a task
    lost with its lock's or its mark's time run out). Returns how many ids wait."""
    if not settings.REDIS_URL:
        return 0
    ids, pending, lock = follow_up_queue.keys()
    client = RedisBroker.get_connection()
    try:
        waiting = client.llen(ids)
        if waiting and not client.exists(pending, lock) and client.set(pending, 1, nx=True, ex=PENDING_SECONDS):
            async_task("relay.tasks.job_follow_ups", save=False)
    except redis.RedisError as e:  # the list is in Redis: the next sweep looks again
        logger.warning("bulk follow-ups not looked at: %s", e)
        return 0
    return waiting


def _chunk_followed_up(job_ids: list[int], deadline: float) -> tuple[int, bool]:
    """Follow up a chunk's jobs, ``READ_TOGETHER`` read at a time, until the deadline passes: (how many, late)."""
    taken = 0
    for start in range(0, len(job_ids), READ_TOGETHER):
        group = job_ids[start : start + READ_TOGETHER]
        jobs, fires = _group_read(group)
        for job_id in group:
            _bulk_follow_up(job_id, jobs, fires)
            taken += 1
            if time.monotonic() > deadline:
                return taken, True
    return taken, False


def _group_read(job_ids: list[int]) -> tuple[dict[int, JobResult] | None, dict[str, bool] | None]:
    """A group of the bulk's jobs in one statement, and whether the incidents their successes would resolve fire in
    one more (most find none): two statements for the group instead of two for each job. (None, None) when the
    read fails: each job is then read on its own."""
    try:
        jobs = jobs_read(job_ids)
        fingerprints = [fingerprint for job in jobs.values() if (fingerprint := incidents.job_fingerprint(job))]
        return jobs, (fire.firing_among(fingerprints) if fingerprints else {})
    except Exception:
        logger.exception("bulk follow-up: jobs %s not read together: each is read on its own", job_ids)
        return None, None


def _bulk_follow_up(job_id: int, jobs: dict[int, JobResult] | None, fires: dict[str, bool] | None) -> None:
    try:
        if jobs is None:
            job_completed_follow_up(job_id=job_id)
        elif (job := jobs.get(job_id)) is not None:  # else gone since it completed: nothing to follow up
            job_followed_up(job, fires=fires)
    except Exception:
        logger.exception("job %s: follow-up failed in the bulk task: queued alone", job_id)
        follow_up_queue.follow_up_alone(job_id)
