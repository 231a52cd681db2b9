"""A baseline run's breaks, computed once its test report is parsed (``relay.tasks.breaks_after_report``): the tests
failing in a nightly or push job at N that passed in the same job of the backend's previous baseline run (N−1,
``ootci.baseline``) open a break, or join the break already open at N (several backends, one break); its suspects
follow (a task). A test known to be flaky (``ootci.verdicts.flaky_evidence``) or disabled never opens one. The same
report closes the backend's open break tests it passes again; a break whose tests all pass is closed."""

from __future__ import annotations

from collections import defaultdict

from django.db import transaction
from django.utils import timezone
from django_q.tasks import async_task

from ootci import baseline, verdicts
from ootci.models import Break, BreakTest, DisabledTest, JobResult, TestCase
from relay.breaks import alerts

TESTS_PER_BREAK = 200  # a job where more tests newly fail (a build that broke everything) keeps the first


def breaks_after_report(*, job_id: int) -> str:
    job = JobResult.objects.select_related("backend").filter(pk=job_id).first()
    if job is None:
        return "missing"
    if job.event_type not in verdicts.BASELINE_EVENTS or job.status != JobResult.Status.COMPLETED:
        return "not a baseline run"
    cases = _cases([job.pk])
    closed = _fixed(job, cases)
    opened = _opened(job, cases)
    return f"{opened} new failing, {closed} fixed"


def _cases(job_ids) -> dict[str, dict]:
    """Each test's status over the jobs (failing wins) and its first failure's message and file."""
    found: dict[str, dict] = {}
    rows = TestCase.objects.filter(job_id__in=job_ids).order_by("id")
    for r in rows.values("test_id", "status", "message", "file"):
        entry = found.setdefault(r["test_id"], {"status": "", "message": "", "file": r["file"]})
        if r["status"] in verdicts.FAILING:
            if entry["status"] not in verdicts.FAILING:
                entry.update(status=r["status"], message=r["message"])
        elif entry["status"] not in verdicts.FAILING and entry["status"] != verdicts.PASSED:
            entry["status"] = r["status"]
    return found


def _previous_job(job: JobResult) -> JobResult | None:
    key = baseline.previous_baseline(job.backend_id, sha=job.job_sha, started_at=job.created_at)
    if key is None:
        return None
    same = JobResult.objects.filter(
        backend_id=job.backend_id,
        event_type=key[0],
        job_sha=key[1],
        workflow_name=job.workflow_name,
        job_name=job.job_name,
    )
    latest = baseline.latest_attempts(same)
    return latest[0] if latest else None


def _opened(job: JobResult, cases: dict[str, dict]) -> int:
    failing = sorted(t for t, c in cases.items() if c["status"] in verdicts.FAILING)
    previous = _previous_job(job) if failing else None
    if previous is None:
        return 0
    before = _cases([previous.pk])
    new = [t for t in failing if before.get(t, {}).get("status") == verdicts.PASSED]
    new = _not_known_flaky(job, new)
    if not new:
        return 0
    with transaction.atomic():
        brk, created = Break.objects.get_or_create(
            upstream_repo=job.upstream_repo, bad_sha=job.job_sha, defaults={"good_sha": previous.job_sha}
        )
        added = 0
        for t in new[:TESTS_PER_BREAK]:
            c = cases[t]
            _, made = BreakTest.objects.get_or_create(
                brk=brk,
                backend_id=job.backend_id,
                test_id=t,
                defaults={
                    "file": c["file"][:500],
                    "message": (c["message"] or "")[:4000],
                    "job": job,
                    "good_job": previous,
                },
            )
            added += made
        if brk.state == Break.State.CLOSED and added:
            Break.objects.filter(pk=brk.pk).update(state=Break.State.OPEN, closed_at=None, closed_note="")
        if added:
            transaction.on_commit(lambda: async_task("relay.tasks.break_suspects", brk.pk), robust=True)
    return added


def _not_known_flaky(job: JobResult, tests: list[str]) -> list[str]:
    """The tests whose known flakiness (their history on the backend's baseline runs) stays under the threshold, and
    not on the backend's disabled list."""
    here = defaultdict(list)
    same_sha = JobResult.objects.filter(backend_id=job.backend_id, event_type=job.event_type, job_sha=job.job_sha)
    rows = TestCase.objects.filter(job__in=same_sha, test_id__in=tests)
    for r in rows.values("test_id", "status", "reruns"):
        here[r["test_id"]].append(r)
    past = baseline.baseline_history(job.backend_id, tests)
    entries = DisabledTest.objects.active().filter(backend_id=job.backend_id)
    disabled = verdicts.job_disabled_tests(tests, entries.values_list("name", "kind", "test_name", "class_name"))
    return [t for t in tests if t not in disabled and not _flaky(here[t], past[t], sha=job.job_sha)]


def _flaky(here: list[dict], past: list[dict], *, sha: str) -> bool:
    """Flaky by its evidence with this run counted (``verdicts.flaky_evidence``), or by its flakiness known before
    this run: its last HISTORY results at other SHAs."""
    if verdicts.flaky_evidence(here, past, sha=sha).flaky:
        return True
    score, n = verdicts.flakiness([r for r in past if r["job_sha"] != sha][: verdicts.HISTORY])
    return score is not None and n >= verdicts.FLAKY_MIN_RESULTS and score >= verdicts.FLAKY_THRESHOLD


def _fixed(job: JobResult, cases: dict[str, dict]) -> int:
    """The backend's open break tests this run passes (a run after the break's own)."""
    passed = [t for t, c in cases.items() if c["status"] == verdicts.PASSED]
    if not passed:
        return 0
    open_tests = BreakTest.objects.filter(
        backend_id=job.backend_id, fixed_at__isnull=True, test_id__in=passed, brk__state=Break.State.OPEN
    ).exclude(brk__bad_sha=job.job_sha)
    open_tests = open_tests.filter(job__finished_at__lt=job.finished_at)
    breaks = set(open_tests.values_list("brk_id", flat=True))
    fixed = open_tests.update(fixed_job=job, fixed_at=timezone.now())
    note = f"passed again in the {job.event_type} run at {job.job_sha[:12]}"
    note += f" ({job.workflow_name} / {job.job_name}: {job.run_url})" if job.run_url else ""
    for brk in Break.objects.filter(pk__in=breaks):
        left = brk.tests.filter(fixed_at__isnull=True)
        if not left.filter(backend_id=job.backend_id).exists():
            alerts.break_fixed_on(brk, job.backend, note=note)
        if not left.exists():
            Break.objects.filter(pk=brk.pk).update(state=Break.State.CLOSED, closed_at=timezone.now(), closed_note=note)
    return fixed
