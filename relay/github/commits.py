"""Upstream commits as the App sees them, for a break's suspects (``relay.breaks.suspects``): the commits between two
SHAs (the compare API), each commit's files, and the PRs that merged it. Callers cache the answers (a commit never
changes): ``ootci.models.CompareRange`` and ``UpstreamCommit``."""

from typing import Any

from relay.github.app import calling, installation_client

COMPARE_PAGES = 40  # pages of 100 commits: GitHub's compare lists at most 10,000 (250 without paging)


def _get(repo: str, path: str, query: dict[str, Any] | None = None) -> Any:
    client = installation_client(repo=repo)
    return calling(repo, f"GET {path}", lambda: client.requester.requestJsonAndCheck("GET", path, parameters=query)[1])


def compare_commits(*, repo: str, base: str, head: str) -> list[dict[str, str]]:
    """GET /repos/{repo}/compare/{base}...{head}, every page: the commits after ``base`` up to ``head``, oldest first,
    each ``{"sha", "title"}``."""
    path = f"/repos/{repo}/compare/{base}...{head}"
    found: list[dict[str, str]] = []
    for page in range(1, COMPARE_PAGES + 1):
        data = _get(repo, path, {"per_page": 100, "page": page}) or {}
        batch = data.get("commits") or []
        found += [
            {"sha": str(c["sha"]), "title": str((c.get("commit") or {}).get("message") or "").split("\n", 1)[0]}
            for c in batch
            if isinstance(c, dict) and c.get("sha")
        ]
        if len(batch) < 100 or len(found) >= int(data.get("total_commits") or 0):
            break
    return found


def commit_detail(*, repo: str, sha: str) -> tuple[str, list[str]]:
    """GET /repos/{repo}/commits/{sha}: its title and the paths of the files it touched (GitHub lists up to 300)."""
    data = _get(repo, f"/repos/{repo}/commits/{sha}") or {}
    title = str((data.get("commit") or {}).get("message") or "").split("\n", 1)[0]
    return title, [str(f["filename"]) for f in data.get("files") or [] if isinstance(f, dict) and f.get("filename")]


def commit_pulls(*, repo: str, sha: str) -> list[dict[str, Any]]:
    """GET /repos/{repo}/commits/{sha}/pulls: the merged PRs that hold the commit, ``{"number", "title", "url"}``."""
    data = _get(repo, f"/repos/{repo}/commits/{sha}/pulls") or []
    return [
        {
            "number": int(p["number"]),
            "title": str(p.get("title") or "")[:500],
            "url": str(p.get("html_url") or ""),
            "merged": bool(p.get("merged_at")),
        }
        for p in data
        if isinstance(p, dict) and str(p.get("number", "")).isdigit()
    ]
