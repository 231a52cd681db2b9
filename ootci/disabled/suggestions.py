"""Suggestions for a backend's disabled-test registry, read from PostgreSQL's test cases (every case, passes
included) and shown to admins, who apply one by hand (``ootci.admin.disabled``): nothing here writes.

- *disable*: a test flaky in more than 2 distinct jobs (attempts) of the backend finished within 6 hours. A case
  is flaky in a job when it passed after reruns, or when the job has both a failing and a passing case of it.
- *re-enable*: a disabled test (in force) that passed at least 150 times within 7 days, with no failure in those
  7 days. Skipped cases count neither way: "when run".
- *expired*: an entry whose expiry has passed (left out of the served file already).

Matching (as ``ootci.models.disabled`` says): a PyTorch name ``test_x (__main__.TestClass)`` matches the cases
named ``test_x`` whose classname's last dotted part is ``TestClass``; a generic id matches TestCase.test_id.
PyTorch's own runner matches more widely (a class prefix, a name without its device and dtype suffix); we match
exactly, so a re-enable suggestion is never made from another test's passes.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Max, Q
from django.utils import timezone

from ootci.models import Backend, DisabledTest, TestCase
from ootci.models.disabled import Kind

FLAKY_HOURS = 6
FLAKY_WINDOW = timedelta(hours=FLAKY_HOURS)
FLAKY_JOBS = 2  # flaky in more than this many jobs within the window
REENABLE_DAYS = 7
REENABLE_WINDOW = timedelta(days=REENABLE_DAYS)
REENABLE_PASSES = 150

PASSED = TestCase.Status.PASSED
PASSES = Count("id", filter=Q(status=PASSED))
FAILURES = Count("id", filter=Q(status__in=TestCase.FAILING))


@dataclass(frozen=True)
class DisableCandidate:
    name: str  # the name to disable it under: PyTorch's when the case has a class, else the generic id
    test_id: str
    jobs: int  # distinct jobs in which it was flaky within the window
    last_job_id: int


@dataclass(frozen=True)
class ReenableCandidate:
    entry: DisabledTest
    passes: int


def disable_candidates(backend: Backend, *, now: datetime | None = None) -> list[DisableCandidate]:
    """Tests flaky in more than FLAKY_JOBS jobs within FLAKY_WINDOW and not in the registry, most jobs first."""
    since = (now or timezone.now()) - FLAKY_WINDOW
    flaky_in_job = (
        TestCase.objects.filter(job__backend=backend, job__finished_at__gte=since)
        .values("job_id", "test_id")
        .annotate(
            rerun_passes=Count("id", filter=Q(status=PASSED, reruns__gt=0)),
            passes=PASSES,
            failures=FAILURES,
            name=Max("name"),
            classname=Max("classname"),
        )
        .filter(Q(rerun_passes__gt=0) | Q(passes__gt=0, failures__gt=0))
        .order_by()
    )
    jobs: dict[str, list[int]] = defaultdict(list)
    names: dict[str, str] = {}
    for row in flaky_in_job:
        jobs[row["test_id"]].append(row["job_id"])
        names[row["test_id"]] = pytorch_name(row["name"], row["classname"]) or row["test_id"]
    disabled = _disabled_keys(backend)
    found = [
        DisableCandidate(name=names[tid], test_id=tid, jobs=len(ids), last_job_id=max(ids))
        for tid, ids in jobs.items()
        if len(ids) > FLAKY_JOBS and not ({tid, names[tid]} & disabled)
    ]
    return sorted(found, key=lambda c: (-c.jobs, c.name))


def pytorch_name(name: str, classname: str) -> str:
    """PyTorch's name of a case (what its runner matches), or "" for a case without a class (a pytest function)."""
    klass = classname.rpartition(".")[2]
    return f"{name} (__main__.{klass})" if klass[:1].isupper() else ""


def _disabled_keys(backend: Backend) -> set[str]:
    """The generic ids and PyTorch names (as ``pytorch_name`` writes them) in the registry, to leave out of disable
    suggestions; expired ones too, which the expired list offers to extend."""
    rows = backend.disabled_tests.values_list("name", "kind", "test_name", "class_name")
    return {name if kind == Kind.GENERIC else f"{test} (__main__.{klass})" for name, kind, test, klass in rows}


def reenable_candidates(backend: Backend, *, now: datetime | None = None) -> list[ReenableCandidate]:
    """Disabled tests in force that passed at least REENABLE_PASSES times within REENABLE_WINDOW, failing none."""
    now = now or timezone.now()
    cases = TestCase.objects.filter(job__backend=backend, job__finished_at__gte=now - REENABLE_WINDOW).order_by()
    counts = {"passes": PASSES, "failures": FAILURES}
    entries = backend.disabled_tests.active(now)
    tally: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    # Generic ids: by test_id (indexed). PyTorch names: the cases of the disabled method names, grouped by
    # classname, whose last dotted part is compared here (portable SQL; a handful of classnames a name).
    generic = entries.filter(kind=Kind.GENERIC)
    by_id = {e.name: e.pk for e in generic.only("name")}
    rows = cases.filter(test_id__in=generic.values("name")).values("test_id").annotate(**counts)
    for row in rows:
        _add(tally[by_id[row["test_id"]]], row)
    pytorch = entries.filter(kind=Kind.PYTORCH)
    by_name = {(e.test_name, e.class_name): e.pk for e in pytorch.only("test_name", "class_name")}
    rows = cases.filter(name__in=pytorch.values("test_name")).values("name", "classname").annotate(**counts)
    for row in rows:
        pk = by_name.get((row["name"], row["classname"].rpartition(".")[2]))
        if pk is not None:
            _add(tally[pk], row)
    chosen = {pk: passes for pk, (passes, failures) in tally.items() if passes >= REENABLE_PASSES and not failures}
    return [
        ReenableCandidate(entry=e, passes=chosen[e.pk])
        for e in DisabledTest.objects.filter(pk__in=chosen).select_related("backend")
    ]


def _add(total: list[int], row: dict) -> None:
    total[0] += row["passes"]
    total[1] += row["failures"]


def expired(backend: Backend, *, now: datetime | None = None) -> list[DisabledTest]:
    return list(backend.disabled_tests.expired(now).order_by("expires_at", "name"))
