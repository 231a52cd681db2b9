"""Which artifacts of a GitHub Actions run hold a job's test reports, the run listed once for all its jobs (and
``run_listing``, which shares a run attempt's job listing the same way for the failed jobs' logs).

A 100-shard run used to list its artifacts 100 times, once per completed job: 100 of the App installation's 5,000
requests an hour. A listing is kept per run and serves every job that completed before it was taken: the reporter
runs after a job's upload step, so such a listing already shows what the job uploaded (with LISTING_MARGIN for
clocks of other hosts). Shards finish minutes apart, though, so that alone still listed about once per job: a
successful job whose run attempt still has a job in progress waits (``job_defers_listing``), and the attempt's last
job to complete lists once for itself and those that waited (``run_jobs_to_list``), and hands each pull its
artifacts. The jobs a listing served are kept with the run attempt (``run_listed``): when the worker lags a burst,
the follow-ups of its last jobs each find the run done, and only the first lists. A failed job lists at once: its
failing tests are what its users come for. A job the sweeper times out ends its run attempt the same way.
"""

import fnmatch
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import Exists, OuterRef
from django.utils import timezone

from ootci.models import JobResult, TestReport
from ootci.rows import columns, rows_as
from relay.github import client as github

logger = logging.getLogger(__name__)

LISTING_SECONDS = 15 * 60  # how long a run's listing is kept for its later jobs
UNLISTED_AFTER = timedelta(minutes=10)  # the sweeper's period: it looks for runs left unlisted that long ago
SERVED_SECONDS = 60 * 60  # how long the jobs a listing served are kept: past the sweeper's look back
SWEPT_SUCCESSES = 20_000  # the most recent successes a sweep looks at
LISTING_MARGIN = timedelta(seconds=2)  # web and worker clocks on different hosts
# A run attempt's other completed successes, by the unique attempt index's first columns (one delivery's workflow run):
# written out and prepared (``ootci.rows``), where the ORM compiled the query for every follow-up of a job whose run
# had ended (most of a burst's jobs, when the worker lags it).
RUN_FIELDS = ("backend_id", "delivery_id", "workflow_name", "run_id", "run_attempt")
RUN_SUCCESSES = (
    f"SELECT {columns(JobResult)} FROM {JobResult._meta.db_table} WHERE "
    + " AND ".join(f"{f} = %s" for f in RUN_FIELDS)
    + f" AND status = '{JobResult.Status.COMPLETED}' AND conclusion = 'success' AND id <> %s ORDER BY id"
)
COPIES = 256  # the listings a process keeps a copy of (of the runs it followed up last)

_copies: dict[str, dict] = {}
_lock = threading.Lock()


def artifact_id_named(job: JobResult) -> int | None:
    """The artifact id of the job's ``artifact_url`` when it is exactly
    ``https://github.com/<verified repo>/actions/runs/<its run_id>/artifacts/<id>``; None for anything else, which
    stays a link and is never fetched."""
    # Compared as text, not by a pattern built per job: compiling one was a tenth of a success's follow-up.
    prefix = f"https://github.com/{job.backend.repo}/actions/runs/{job.run_id}/artifacts/".lower()
    url = (job.artifact_url or "").lower()
    number = url[len(prefix) :]
    if not url.startswith(prefix) or not (0 < len(number) <= 20 and number.isascii() and number.isdigit()):
        return None
    return int(number)


def job_artifacts(job: JobResult, listing: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The artifacts that hold the job's reports: the one its ``artifact_url`` names, else those of its run (in
    ``listing``, else listed) whose name matches the backend's report pattern and the job's name. GitHubError when
    GitHub cannot say."""
    named = artifact_id_named(job)
    if named is not None:
        return [{"id": named, "name": "", "size_in_bytes": 0, "expired": False}]
    if job.artifact_url:
        logger.info("job %s: artifact_url %r is not this run's artifact: kept as a link", job.pk, job.artifact_url)
    pattern = job.backend.report_pattern or "test-reports*"
    return [
        item
        for item in (_run_artifacts([job]) if listing is None else listing)
        if fnmatch.fnmatchcase(item["name"], pattern) and names_job(item["name"], job.job_name) and not item["expired"]
    ]


def names_job(artifact_name: str, job_name: str) -> bool:
    """Whether ``job_name`` is in ``artifact_name`` as a whole word: not next to a letter or digit, so that shard-1
    does not take test-reports-shard-10's report. A job reported without a name (a one-job workflow) takes every
    artifact of the pattern, as before. Compared as text: a pattern compiled per job cost a follow-up."""
    if not job_name:
        return True
    at = artifact_name.find(job_name)
    while at >= 0:
        end = at + len(job_name)
        if (at == 0 or not artifact_name[at - 1].isalnum()) and (
            end == len(artifact_name) or not artifact_name[end].isalnum()
        ):
            return True
        at = artifact_name.find(job_name, at + 1)
    return False


def reports_to_pull(jobs: list[JobResult]) -> dict[JobResult, list[dict[str, Any]]]:
    """Those of ``jobs`` (of one run) with artifacts not pulled yet, and those artifacts, from one listing of the run
    (GitHubError when GitHub cannot say): handed to the pull, which then does not list the run again."""
    listing = None if all(artifact_id_named(job) is not None for job in jobs) else _run_artifacts(jobs)
    found = {job: items for job in jobs if (items := job_artifacts(job, listing))}
    if not found:  # most jobs: no report uploaded, nothing to compare
        return {}
    pulled = set(
        TestReport.objects.filter(job__in=found, artifact_id__isnull=False).values_list("job_id", "artifact_id")
    )
    wanted = {job: [item for item in items if (job.pk, item["id"]) not in pulled] for job, items in found.items()}
    return {job: items for job, items in wanted.items() if items}


def job_defers_listing(job: JobResult) -> bool:
    """A successful job whose reports need its run listed: while its run attempt has a job in progress, the last of
    them lists for it."""
    return job.conclusion == "success" and artifact_id_named(job) is None


def run_jobs_to_list(job: JobResult) -> list[JobResult]:
    """For a job whose run attempt has no job in progress any more: it and the attempt's successes that waited, less
    those a listing of the run already served (``run_listed``), or [] when that listing served it too. When the
    worker lags a burst, the follow-ups of a run's last jobs run together after it, and each finds its run done."""
    served = _run_served(job)
    if job.pk in served:
        return []
    return [job, *(sibling for sibling in run_deferred_jobs(job) if sibling.pk not in served)]


def run_listed(jobs: list[JobResult]) -> None:
    """Record that a listing of their run served ``jobs`` (their pulls are queued)."""
    try:
        cache.set(_served_key(jobs[0]), _run_served(jobs[0]) | {job.pk for job in jobs}, SERVED_SECONDS)
    except Exception as e:  # a cache that fails costs another listing, never a pull
        logger.warning("run listing: what it served not kept (%s)", e)


def runs_unlisted(*, now: datetime) -> list[int]:
    """A job of each GitHub Actions run attempt with a success that waited for a listing no follow-up took, its
    newest such success completed UNLISTED_AFTER to twice that ago: its last job's follow-up was lost (a worker
    killed with it in hand). The sweeper, every UNLISTED_AFTER, follows them up again (``run_reports_pull``)."""
    since = now - 2 * UNLISTED_AFTER
    waited = (
        JobResult.objects.filter(
            status=JobResult.Status.COMPLETED,
            # By the created_at index: a job runs at most ZOMBIE_TIMEOUT_HOURS before the sweeper ends it.
            created_at__gte=since - timedelta(hours=settings.ZOMBIE_TIMEOUT_HOURS),
            conclusion="success",
            completed_at__gte=since,
            completed_at__lt=now - UNLISTED_AFTER,
            run_id__regex=r"^[0-9]{1,20}$",
        )
        .exclude(Exists(TestReport.objects.filter(job=OuterRef("pk"))))
        .select_related("backend")
        .order_by("-completed_at", "-pk")
    )
    runs: dict[str, JobResult] = {}
    for job in waited[:SWEPT_SUCCESSES]:
        if job_defers_listing(job):
            runs.setdefault(_served_key(job), job)
    return [job.pk for job in runs.values() if job.pk not in _run_served(job)]


def _run_served(job: JobResult) -> set[int]:
    try:
        return cache.get(_served_key(job)) or set()
    except Exception as e:
        logger.warning("run listing: cache unavailable (%s)", e)
        return set()


def _served_key(job: JobResult) -> str:
    return f"relay:run-served:{job.backend_id}:{job.delivery_id}:{job.run_id}:{job.run_attempt}:{job.workflow_name}"


def run_deferred_jobs(job: JobResult) -> list[JobResult]:
    """The other completed jobs of ``job``'s run attempt that waited for its last job to list the run."""
    found = []
    for sibling in rows_as(JobResult, RUN_SUCCESSES, [*(getattr(job, f) for f in RUN_FIELDS), job.pk]):
        sibling.backend = job.backend
        if job_defers_listing(sibling):
            found.append(sibling)
    return found


def _run_artifacts(jobs: list[JobResult]) -> list[dict[str, Any]]:
    """The listing of the run of ``jobs`` (one run's), taken after each of them completed."""
    job = jobs[0]
    done = [j.completed_at or j.updated_at for j in jobs]
    return run_listing(
        key=f"relay:run-artifacts:{job.backend.repo.lower()}:{job.run_id}",
        done=None if None in done else max(done),
        fetch=lambda: github.run_artifacts(repo=job.backend.repo, run_id=int(job.run_id)),
    )


def run_listing(*, key: str, done: datetime | None, fetch: Callable[[], list[Any]]) -> list[Any]:
    """What ``fetch`` lists of a run (its artifacts, an attempt's jobs), shared by the run's jobs: the listing kept
    under ``key`` when it was taken after ``done`` (the asking job's completion, with LISTING_MARGIN), else a new one,
    kept for LISTING_SECONDS."""

    def serves(kept: dict | None) -> bool:
        return kept is not None and done is not None and kept["at"] >= done + LISTING_MARGIN

    # This process's copy first: a worker follows up many jobs of a run in a row, and asking Redis was a tenth of a
    # successful job's follow-up.
    if serves(kept := _copies.get(key)) and kept["at"] > timezone.now() - timedelta(seconds=LISTING_SECONDS):
        return kept["items"]
    try:
        kept = cache.get(key)
    except Exception as e:  # a cache that fails costs a listing, never the pull
        logger.warning("run listing: cache unavailable (%s)", e)
        kept = None
    if not serves(kept):
        kept = {"at": timezone.now(), "items": None}  # taken before the request: what completed by now is in it
        kept["items"] = fetch()
        try:
            cache.set(key, kept, LISTING_SECONDS)
        except Exception as e:
            logger.warning("run listing: not kept (%s)", e)
    with _lock:
        _copies[key] = kept
        while len(_copies) > COPIES:
            _copies.pop(next(iter(_copies)))  # the oldest kept
    return kept["items"]
