"""Self-reported upstream SHAs, checked (issue 26): a nightly or periodic self-report names the upstream commit it
tested, and it must be a commit of ``UPSTREAM_REPO``.

GitHub is asked as the App (``relay.github.client.commit_exists``; it answers 422 or 404 for a SHA it does not know).
Its answers are cached: a known commit for ``SHA_CHECK_CACHE_SECONDS`` (1 h; commits do not go away), an unknown one
for ``UNKNOWN_SECONDS`` (a report racing the push of its commit is refused for minutes, not an hour). When GitHub
cannot say (unreachable, 5xx, a rate limit, the App not installed), the report is accepted and marked unverified, and
GitHub is left alone for ``DOWN_SECONDS`` (every report meanwhile is unverified at once, not after a timeout); the
``relay: re-check unverified SHAs`` schedule asks again (:func:`sha_checks_retry`).
"""

import logging

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from ootci.models import JobResult
from ootci.replication import job_results_changed
from relay.github import client as github

logger = logging.getLogger(__name__)

Check = JobResult.ShaCheck
UNKNOWN_SECONDS = 300
DOWN_SECONDS = 60
RETRY_BATCH = 200  # distinct SHAs asked about per run of the schedule


def upstream_sha_check(*, sha: str) -> str:
    """What GitHub says of ``sha`` in the upstream repository: ``Check.VERIFIED``, ``Check.UNKNOWN`` (not a commit
    there) or ``Check.UNVERIFIED`` (GitHub cannot say now)."""
    repo = settings.UPSTREAM_REPO
    key = _key("sha", repo.lower(), sha.lower())
    answer = _cached(key)
    if answer in (Check.VERIFIED, Check.UNKNOWN):
        return answer
    if _cached(_key("down")):
        return Check.UNVERIFIED
    try:
        known = github.commit_exists(repo=repo, sha=sha)
    except github.GitHubError as e:
        logger.warning("cannot check upstream SHA %s of %s, accepted unverified: %s", sha, repo, e)
        _keep(_key("down"), True, DOWN_SECONDS)
        return Check.UNVERIFIED
    answer = Check.VERIFIED if known else Check.UNKNOWN
    _keep(key, str(answer), settings.SHA_CHECK_CACHE_SECONDS if known else UNKNOWN_SECONDS)
    return answer


def unknown_sha_detail(*, sha: str, event_type: str) -> str:
    return (
        f"{sha} is not a commit of {settings.UPSTREAM_REPO} (GitHub does not know it): a {event_type} report's "
        "delivery_id is the upstream commit it tested."
    )


def sha_checks_retry() -> dict[str, int]:
    """Ask GitHub again about the SHAs of the self-reports accepted unverified (the schedule, every 10 minutes): their
    jobs become verified, or unknown (kept and marked, shown on their job page: a report is never deleted). Stops at
    the first SHA GitHub still cannot say anything about; the next run goes on. Returns the jobs marked each way and
    the SHAs left unverified."""
    pending = JobResult.objects.filter(sha_check=Check.UNVERIFIED)
    shas = list(pending.order_by().values_list("job_sha", flat=True).distinct()[:RETRY_BATCH])
    done = {"verified": 0, "unknown": 0, "left": 0}
    for i, sha in enumerate(shas):
        _forget(_key("down"))  # the schedule always asks
        answer = upstream_sha_check(sha=sha)
        if answer == Check.UNVERIFIED:
            done["left"] = len(shas) - i
            break
        rows = pending.filter(job_sha=sha).update(sha_check=answer, updated_at=timezone.now())
        done[str(answer)] += rows
        if answer == Check.UNKNOWN:
            logger.warning(
                "self-reported SHA %s is not a commit of %s: %s job(s) marked", sha, settings.UPSTREAM_REPO, rows
            )
    if done["verified"] or done["unknown"]:
        job_results_changed()
    return done


def _key(*parts: str) -> str:
    # GitHub's URL in the key: answers of one GitHub (or of a test's fake) are never another's.
    return ":".join(["ootci:upstream-sha", settings.GITHUB_API_URL, *parts])


def _cached(key: str):
    try:
        return cache.get(key)
    except Exception as e:  # the cache is an optimisation here: a failing one means asking GitHub
        logger.warning("SHA check cache read failed (%s: %s)", type(e).__name__, e)
        return None


def _keep(key: str, value, timeout: int) -> None:
    try:
        cache.set(key, value, timeout)
    except Exception as e:
        logger.warning("SHA check cache write failed (%s: %s)", type(e).__name__, e)


def _forget(key: str) -> None:
    try:
        cache.delete(key)
    except Exception as e:
        logger.warning("SHA check cache delete failed (%s: %s)", type(e).__name__, e)
