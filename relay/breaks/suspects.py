"""A break's suspects (``relay.tasks.break_suspects``, queued when a break opens or gains tests): the upstream
commits in (N−1, N] as GitHub's compare lists them (as the App, cached), each by the PR that merged it, ranked by
``ootci.breaks.rank`` on what this relay already holds: the break's backends' PR-time runs of those PRs, and the files
each PR touched. The incidents and issues of the break follow (``relay.breaks.alerts``)."""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.models import Schedule
from django_q.tasks import schedule

from ootci import baseline, verdicts
from ootci import breaks as rules
from ootci.models import Break, Event, JobResult, Suspect, TestCase
from relay.breaks import alerts, commits
from relay.github.app import GitHubError

logger = logging.getLogger(__name__)

ATTEMPTS = 4
RETRY_SECONDS = 60


def break_suspects(*, break_id: int, attempt: int = 1) -> str:
    brk = Break.objects.filter(pk=break_id).first()
    if brk is None:
        return "missing"
    try:
        shas = commits.range_shas(repo=brk.upstream_repo, base=brk.good_sha, head=brk.bad_sha)
        info = commits.commits_info(repo=brk.upstream_repo, shas=shas)
    except GitHubError as e:
        logger.warning("break %s: suspects not ranked (attempt %s): %s", brk.pk, attempt, e)
        if e.retryable and attempt < ATTEMPTS:
            at = timezone.now() + timedelta(seconds=getattr(e, "wait_seconds", RETRY_SECONDS * attempt))
            schedule("relay.tasks.break_suspects", brk.pk, attempt + 1, schedule_type=Schedule.ONCE, next_run=at)
        return "github"
    tests = list(brk.tests.values("backend_id", "test_id", "file", "message"))
    pulls = {sha: (info[sha].pulls or [{}])[0] for sha in shas if sha in info}
    runs = pr_runs({t["backend_id"] for t in tests}, {p["number"] for p in pulls.values() if p}, tests)
    candidates = []
    for position, sha in enumerate(shas):
        pr = pulls.get(sha) or {}
        found = runs.get(pr.get("number"), {})
        candidates.append(
            rules.Candidate(
                sha=sha,
                position=position,
                pr_number=pr.get("number"),
                files=tuple(info[sha].files if sha in info else ()),
                failed=tuple(found.get("failed", ())),
                passed=tuple(found.get("passed", ())),
                tested=bool(found.get("tested")),
            )
        )
    named = rules.named_files([t["message"] for t in tests], [t["file"] or t["test_id"].split("::")[0] for t in tests])
    ranked = rules.rank(candidates, named=named)[: settings.BREAK_SUSPECTS_KEPT]
    with transaction.atomic():
        Suspect.objects.filter(brk=brk).delete()
        Suspect.objects.bulk_create(
            Suspect(
                brk=brk,
                sha=r.candidate.sha,
                position=r.candidate.position,
                rank=n,
                tier=r.tier,
                pr_number=r.candidate.pr_number,
                title=(pulls.get(r.candidate.sha) or {}).get("title") or info[r.candidate.sha].title,
                url=(pulls.get(r.candidate.sha) or {}).get("url", "")[:500],
                evidence=r.evidence[:20],
            )
            for n, r in enumerate(ranked, 1)
        )
        Break.objects.filter(pk=brk.pk).update(commits=shas, suspects_at=timezone.now())
        brk.refresh_from_db()
        alerts.break_evaluate(brk)
    return f"{len(ranked)} suspects of {len(shas)} commits"


def pr_runs(backend_ids: set[int], numbers: set[int], tests: list[dict]) -> dict[int, dict]:
    """Per PR number, what the backends' PR-time runs (their latest attempts on the PR's newest tested head) said of
    the break's tests: ``failed`` (new failures there: strong evidence), ``passed``, and whether it ``tested`` them."""
    wanted = defaultdict(set)
    for t in tests:
        wanted[t["backend_id"]].add(t["test_id"])
    jobs = JobResult.objects.filter(
        backend_id__in=backend_ids,
        event_type=Event.PULL_REQUEST,
        pr_number__in=numbers,
        status=JobResult.Status.COMPLETED,
    ).select_related("backend")
    newest: dict[tuple[int, int], str] = {}
    for backend_id, number, sha in jobs.order_by("finished_at", "id").values_list("backend_id", "pr_number", "job_sha"):
        newest[backend_id, number] = sha
    latest = [j for j in baseline.latest_attempts(jobs) if newest.get((j.backend_id, j.pr_number)) == j.job_sha]
    by_id = {j.pk: j for j in latest}
    all_tests = set().union(*wanted.values()) if wanted else set()
    cases = TestCase.objects.filter(job_id__in=by_id, test_id__in=all_tests)
    statuses: dict[tuple[int, str], set[str]] = defaultdict(set)
    lines: dict[tuple[int, str], str] = {}
    for job_id, test_id, status, message in cases.values_list("job_id", "test_id", "status", "message"):
        if test_id in wanted[by_id[job_id].backend_id]:
            statuses[job_id, test_id].add(status)
            if status in verdicts.FAILING:
                lines.setdefault((job_id, test_id), alerts.failing_line(message))
    failed_jobs = [by_id[j] for j, _ in statuses if any(s in verdicts.FAILING for s in statuses[j, _])]
    found_verdicts = baseline.jobs_verdicts(list({j.pk: j for j in failed_jobs}.values()))
    found: dict[int, dict] = defaultdict(lambda: {"failed": [], "passed": [], "tested": False})
    for (job_id, test_id), seen in sorted(statuses.items()):
        job = by_id[job_id]
        entry = found[job.pr_number]
        if seen & set(verdicts.FAILING):
            tv = next((t for t in found_verdicts[job_id].tests if t.test_id == test_id), None)
            verdict = tv.verdict if tv else verdicts.UNKNOWN
            entry["tested"] = True
            text = f"{job.backend.repo}: its PR-time run ({job.workflow_name} / {job.job_name}) failed {test_id}"
            line = lines.get((job_id, test_id), "")
            if verdict == verdicts.NEW:
                entry["failed"].append({"kind": "pr_run_failed", "text": text, "url": job.run_url, "line": line})
            else:
                entry["passed"].append(
                    {"kind": "pr_run_failed_" + verdict, "text": f"{text}, but {verdict} there", "url": job.run_url}
                )
        elif verdicts.PASSED in seen:
            entry["tested"] = True
            text = f"{job.backend.repo}: its PR-time run ({job.workflow_name} / {job.job_name}) passed {test_id}"
            entry["passed"].append({"kind": "pr_run_passed", "text": text, "url": job.run_url})
    return found
