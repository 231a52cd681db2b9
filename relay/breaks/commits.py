"""The commits of a break's range and what GitHub says of each, cached in the database (``CompareRange``,
``UpstreamCommit``): a range or a commit is asked of GitHub once, whatever the number of breaks and backends."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from django.db import connections

from ootci.models import CompareRange, UpstreamCommit
from relay.github import commits as github

THREADS = 8  # GitHub calls in flight for one range: its latency, not our CPU, bounds a break's suspects


def range_shas(*, repo: str, base: str, head: str) -> list[str]:
    """The SHAs of (base, head], oldest first (GitHub's compare, as the App, cached)."""
    cached = CompareRange.objects.filter(upstream_repo=repo, base=base, head=head).values_list("shas", flat=True)
    if (found := cached.first()) is not None:
        return found
    shas = [c["sha"] for c in github.compare_commits(repo=repo, base=base, head=head)]
    # Cached by a concurrent task meanwhile: the same answer, kept once.
    CompareRange.objects.bulk_create(
        [CompareRange(upstream_repo=repo, base=base, head=head, shas=shas)], ignore_conflicts=True
    )
    return shas


def commits_info(*, repo: str, shas: list[str]) -> dict[str, UpstreamCommit]:
    """Each commit's files and merged PRs: the cached ones read, the others asked of GitHub (in parallel) and kept."""
    found = {c.sha: c for c in UpstreamCommit.objects.filter(upstream_repo=repo, sha__in=shas)}
    missing = [sha for sha in shas if sha not in found]
    if missing:
        with ThreadPoolExecutor(max_workers=min(THREADS, len(missing))) as pool:
            answers = list(pool.map(lambda sha: _asked(repo, sha), missing))
        rows = [UpstreamCommit(upstream_repo=repo, sha=sha, title=a[0], files=a[1], pulls=a[2]) for sha, a in answers]
        UpstreamCommit.objects.bulk_create(rows, ignore_conflicts=True)
        found |= {c.sha: c for c in UpstreamCommit.objects.filter(upstream_repo=repo, sha__in=missing)}
    return found


def _asked(repo: str, sha: str) -> tuple[str, tuple[str, list[str], list[dict]]]:
    try:
        pulls = github.commit_pulls(repo=repo, sha=sha)
        merged = [p for p in pulls if p.get("merged")] or pulls
        title, files = github.commit_detail(repo=repo, sha=sha)
        return sha, ((merged[0]["title"] if merged else title)[:500], files[:300], merged[:3])
    finally:
        connections.close_all()  # a pool thread's own connections (the App's token cache may have used one)
