"""Bisection on demand (README "Breaks"): a maintainer asks for one from a break's page; the relay dispatches
``repository_dispatch`` events of type ``bisect`` to one backend that opted in (``Backend.bisect``), one candidate
upstream SHA each, at the midpoints of the break's commit range, never at a commit already tested (its baseline runs,
earlier steps). Each step's job reports through the callback contract; its test report decides it (good, bad, or
inconclusive). It stops at one commit, when runs were inconclusive twice, or at BISECT_DAILY_CAP dispatches to the
backend in 24 h (``ootci.breaks.bisect_next`` is the rule)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.tasks import async_task

from ootci import breaks as rules
from ootci import verdicts
from ootci.models import BISECT_EVENT, Backend, BisectStep, Break, Delivery, Dispatch, JobResult, TestCase

STOPPED_BY = {rules.GOOD: BisectStep.State.GOOD, rules.BAD: BisectStep.State.BAD}


class BisectRefused(Exception):
    def __init__(self, status_code: int, detail: str):
        super().__init__(detail)
        self.status_code, self.detail = status_code, detail


def bisect_request(*, break_id: int, backend: Backend, user=None) -> str:
    """Start a bisection of the break on ``backend``; BisectRefused (409) when it cannot start."""
    with transaction.atomic():
        brk = Break.objects.select_for_update().filter(pk=break_id).first()
        if brk is None or not brk.tests.filter(backend=backend).exists():
            raise BisectRefused(404, f"{backend.repo} has no break {break_id}.")
        if not backend.bisect:
            raise BisectRefused(409, f"{backend.repo} has not opted in to bisection (its backend's “bisect” field).")
        if brk.state == Break.State.CLOSED:
            raise BisectRefused(409, f"Break {brk.pk} is closed: its tests pass again.")
        if brk.bisection == Break.Bisection.RUNNING:
            raise BisectRefused(409, f"A bisection of break {brk.pk} is already running.")
        if brk.bisection == Break.Bisection.FOUND:
            raise BisectRefused(409, f"The bisection of break {brk.pk} already found {brk.culprit_sha[:12]}.")
        brk.bisection, brk.bisect_backend, brk.bisect_note, brk.culprit_sha = Break.Bisection.RUNNING, backend, "", ""
        brk.bisect_requested_by = user if user is not None and user.is_authenticated else None
        brk.save(update_fields=["bisection", "bisect_backend", "bisect_note", "culprit_sha", "bisect_requested_by"])
    return bisect_advance(break_id=brk.pk)


def bisect_advance(*, break_id: int) -> str:
    """The bisection's next step: dispatch the next candidate, or stop (found, inconclusive, capped)."""
    with transaction.atomic():
        brk = Break.objects.select_for_update().filter(pk=break_id).first()
        if brk is None or brk.bisection != Break.Bisection.RUNNING or brk.bisect_backend_id is None:
            return "not running"
        backend = brk.bisect_backend
        steps = list(brk.steps.filter(backend=backend).select_related("dispatch"))
        silent = timezone.now() - timedelta(hours=settings.BISECT_STEP_HOURS)
        for s in (s for s in steps if s.state == BisectStep.State.DISPATCHED):
            # A dispatch GitHub refused for good, or a run that never reported, is an inconclusive step.
            if s.dispatch and s.dispatch.status == Dispatch.Status.FAILED:
                s.state, s.note = BisectStep.State.INCONCLUSIVE, f"the dispatch failed: {s.dispatch.last_error}"[:300]
            elif s.created_at < silent:
                s.state, s.note = BisectStep.State.INCONCLUSIVE, f"no result within {settings.BISECT_STEP_HOURS} h"
            else:
                continue
            s.save(update_fields=["state", "note"])
        if any(s.state == BisectStep.State.DISPATCHED for s in steps):
            return "waiting"
        if not brk.commits:
            return _stop(brk, Break.Bisection.INCONCLUSIVE, "the commit range is not known yet (no suspects)")
        known = results_known(brk, backend)
        for s in steps:
            known[s.sha] = s.state
        inconclusive = sum(s.state == BisectStep.State.INCONCLUSIVE for s in steps)
        found = rules.bisect_next(brk.commits, known, inconclusive=inconclusive)
        if found.done:
            state = Break.Bisection.FOUND if found.culprit else Break.Bisection.INCONCLUSIVE
            return _stop(brk, state, found.why, culprit=found.culprit)
        since = timezone.now() - timedelta(hours=24)
        if BisectStep.objects.filter(backend=backend, created_at__gte=since).count() >= settings.BISECT_DAILY_CAP:
            cap = settings.BISECT_DAILY_CAP
            return _stop(brk, Break.Bisection.CAPPED, f"{backend.repo} had its {cap} bisection dispatches in 24 h")
        step = _dispatched(brk, backend, found.sha, n=len(steps) + 1)
        _alerts_follow(brk.pk)
    return f"dispatched {step.sha[:12]}"


def bisections_advance() -> dict[str, int]:
    """The schedule (every 10 minutes): each running bisection advanced, so a step whose run never reported (a lost
    dispatch, a job that never called back) ends inconclusive after BISECT_STEP_HOURS instead of waiting forever."""
    running = Break.objects.filter(bisection=Break.Bisection.RUNNING).values_list("pk", flat=True)
    return dict(Counter(bisect_advance(break_id=pk).split(" ")[0] for pk in running))


def _alerts_follow(break_id: int) -> None:
    """The break's incidents and issues show the bisection (a task: they call GitHub)."""
    transaction.on_commit(lambda: async_task("relay.tasks.break_alerts", break_id), robust=True)


def _stop(brk: Break, state: str, why: str, *, culprit: str = "") -> str:
    brk.bisection, brk.bisect_note, brk.culprit_sha = state, why[:500], culprit
    brk.save(update_fields=["bisection", "bisect_note", "culprit_sha"])
    _alerts_follow(brk.pk)
    return state


def _dispatched(brk: Break, backend: Backend, sha: str, *, n: int) -> BisectStep:
    tests = sorted(brk.tests.filter(backend=backend).values_list("test_id", flat=True))
    payload = {
        "repository": {"full_name": brk.upstream_repo},
        "head_sha": sha,
        "after": sha,
        "bisect": {"break": brk.pk, "step": n, "good": brk.good_sha, "bad": brk.bad_sha, "tests": tests[:100]},
    }
    delivery = Delivery.objects.create(
        delivery_id=f"bisect-{brk.pk}-{backend.pk}-{n}-{sha[:12]}",
        event=BISECT_EVENT,
        upstream_repo=brk.upstream_repo,
        head_sha=sha,
        payload=payload,
    )
    dispatch = Dispatch.objects.create(delivery=delivery, backend=backend)
    step = BisectStep.objects.create(brk=brk, backend=backend, sha=sha, dispatch=dispatch)
    transaction.on_commit(lambda: async_task("relay.tasks.dispatch_send", dispatch.pk), robust=True)
    return step


def results_known(brk: Break, backend: Backend) -> dict[str, str]:
    """What the backend's baseline runs already say of the break's tests at commits of its range: bad where one
    failed, good where all passed."""
    tests = set(brk.tests.filter(backend=backend).values_list("test_id", flat=True))
    rows = TestCase.objects.filter(
        job__backend=backend,
        job__event_type__in=verdicts.BASELINE_EVENTS,
        job__job_sha__in=brk.commits,
        test_id__in=tests,
    ).values_list("job__job_sha", "test_id", "status")
    return _judged(rows, tests)


def _judged(rows, tests: set[str]) -> dict[str, str]:
    seen: dict[str, dict[str, set[str]]] = {}
    for sha, test_id, status in rows:
        seen.setdefault(sha, {}).setdefault(test_id, set()).add(status)
    found = {}
    for sha, by_test in seen.items():
        if any(s & set(verdicts.FAILING) for s in by_test.values()):
            found[sha] = rules.BAD
        elif set(by_test) >= tests and all(verdicts.PASSED in s for s in by_test.values()):
            found[sha] = rules.GOOD
    return found


def step_after_report(*, job_id: int) -> str:
    """A bisection job's result decides its step: bad when it failed a test of the break, good when it passed them
    all, else inconclusive (an infra failure, a cancelled run, tests not run)."""
    job = JobResult.objects.filter(pk=job_id).first()
    step = BisectStep.objects.select_related("brk").filter(dispatch_id=job.dispatch_id).first() if job else None
    if job is None or step is None or step.state != BisectStep.State.DISPATCHED:
        return "no step waiting"
    tests = set(step.brk.tests.filter(backend_id=step.backend_id).values_list("test_id", flat=True))
    rows = TestCase.objects.filter(job=job, test_id__in=tests).values_list("test_id", "status")
    judged = _judged([(step.sha, t, s) for t, s in rows], tests).get(step.sha)
    state = STOPPED_BY.get(judged, BisectStep.State.INCONCLUSIVE)
    note = "" if judged else "no result for the break's tests"
    if job.outcome == JobResult.Outcome.INFRA and not rows:
        note = f"the job ended {job.conclusion or 'without a result'}"
    BisectStep.objects.filter(pk=step.pk, state=BisectStep.State.DISPATCHED).update(
        state=state, job=job, note=note, decided_at=timezone.now()
    )
    return bisect_advance(break_id=step.brk_id)


def step_after_completion(*, job_id: int) -> str:
    """A bisection job that ended without a test report to come (cancelled, timed out, infra): inconclusive."""
    job = JobResult.objects.filter(pk=job_id).first()
    if job and (job.conclusion in ("cancelled", "timed_out", "skipped") or job.outcome == JobResult.Outcome.INFRA):
        return step_after_report(job_id=job.pk)
    return "report awaited"
