"""A backend's breaks as the HUD shows them (``/oot/<org>/<repo>/breaks/``, its JSON, the failing-tests view of a
run, the test page): each break's runs, tests, ranked suspects with their evidence, and its bisection's steps. Read
from the rows ``relay.breaks`` writes; a few queries per page, whatever the number of breaks."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from ootci import breaks as rules
from ootci.models import BisectStep, Break, BreakTest, Suspect

LIMIT = 50


@dataclass
class BreakView:
    id: int
    state: str
    upstream_repo: str
    good_sha: str
    bad_sha: str
    opened_at: datetime
    closed_at: datetime | None
    closed_note: str
    commits: int
    suspects_at: datetime | None
    runs: list[dict] = field(default_factory=list)
    tests: list[dict] = field(default_factory=list)
    suspects: list[dict] = field(default_factory=list)
    bisection: dict = field(default_factory=dict)


def breaks(*, backend_id: int | None = None, state: str = "", bad_sha: str = "", test_id: str = "") -> list[BreakView]:
    """The breaks (newest first, at most LIMIT) with a test on ``backend_id``, or of ``test_id``, or at ``bad_sha``."""
    found = Break.objects.all()
    tests = BreakTest.objects.all()
    if backend_id is not None:
        tests = tests.filter(backend_id=backend_id)
    if test_id:
        tests = tests.filter(test_id=test_id)
    if backend_id is not None or test_id:
        found = found.filter(pk__in=tests.values("brk_id"))
    if state:
        found = found.filter(state=state)
    if bad_sha:
        found = found.filter(bad_sha=bad_sha)
    rows = list(found.select_related("bisect_backend")[:LIMIT])
    return _assembled(rows)


def _assembled(rows: list[Break]) -> list[BreakView]:
    ids = [b.pk for b in rows]
    tests, suspects, steps = defaultdict(list), defaultdict(list), defaultdict(list)
    runs: dict[int, dict] = defaultdict(dict)
    break_tests = BreakTest.objects.filter(brk_id__in=ids).select_related("backend", "job", "good_job", "fixed_job")
    for t in break_tests:
        tests[t.brk_id].append(
            {
                "test_id": t.test_id,
                "backend": t.backend.repo,
                "line": _last_line(t.message),
                "job_id": t.job_id,
                "run_url": t.job.run_url if t.job else "",
                "fixed": t.fixed_at,
                "fixed_run_url": t.fixed_job.run_url if t.fixed_job else "",
            }
        )
        for role, job in (("failing", t.job), ("previous", t.good_job), ("fixed", t.fixed_job)):
            if job is not None:
                runs[t.brk_id][job.pk] = {
                    "role": role,
                    "backend": t.backend.repo,
                    "job_id": job.pk,
                    "event": job.event_type,
                    "sha": job.job_sha,
                    "job": f"{job.workflow_name} / {job.job_name}",
                    "run_url": job.run_url,
                }
    for s in Suspect.objects.filter(brk_id__in=ids).order_by("brk_id", "rank"):
        suspects[s.brk_id].append(
            {
                "rank": s.rank,
                "tier": s.tier,
                "tier_text": rules.MEANING.get(s.tier, ""),
                "sha": s.sha,
                "pr_number": s.pr_number,
                "title": s.title,
                "url": s.url,
                "evidence": s.evidence,
            }
        )
    for st in BisectStep.objects.filter(brk_id__in=ids).select_related("backend", "job"):
        steps[st.brk_id].append(
            {
                "sha": st.sha,
                "backend": st.backend.repo,
                "state": st.state,
                "note": st.note,
                "dispatched_at": st.created_at,
                "decided_at": st.decided_at,
                "run_url": st.job.run_url if st.job else "",
            }
        )
    return [
        BreakView(
            id=b.pk,
            state=b.state,
            upstream_repo=b.upstream_repo,
            good_sha=b.good_sha,
            bad_sha=b.bad_sha,
            opened_at=b.opened_at,
            closed_at=b.closed_at,
            closed_note=b.closed_note,
            commits=len(b.commits),
            suspects_at=b.suspects_at,
            runs=list(runs[b.pk].values()),
            tests=tests[b.pk],
            suspects=suspects[b.pk],
            bisection={
                "state": b.bisection,
                "note": b.bisect_note,
                "culprit": b.culprit_sha,
                "backend": b.bisect_backend.repo if b.bisect_backend else "",
                "steps": steps[b.pk],
            },
        )
        for b in rows
    ]


def _last_line(message: str) -> str:
    lines = [x.strip() for x in (message or "").splitlines() if x.strip()]
    return (lines[-1] if lines else "")[:300]
