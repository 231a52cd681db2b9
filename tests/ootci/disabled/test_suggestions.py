"""Suggestions for the disabled-test registry from hand-built histories, just either side of each threshold: flaky in
2 vs 3 jobs within 6 hours, 149 vs 150 passes, a failure within 7 days; expired entries."""

import itertools
from datetime import timedelta

import pytest
from django.utils import timezone

from ootci.disabled import suggestions as suggest
from ootci.models import DisabledTest, TestCase, TestReport
from tests.hud import builders

pytestmark = pytest.mark.django_db

_digests = itertools.count()
ADD = ("test_add_npu_float32", "TestBinaryUfuncsPRIVATEUSE1")
ADD_NAME = "test_add_npu_float32 (__main__.TestBinaryUfuncsPRIVATEUSE1)"
ADD_ID = "test/test_binary_ufuncs.py::TestBinaryUfuncs{DEVICE}::test_add_{device}_float32"


@pytest.fixture
def npu(make_backend):
    return make_backend("acme/npu", device="npu")


def job_with(backend, *cases, hours: float = 1):
    """A job finished ``hours`` ago with ``cases``: (status, reruns) of the test ADD each."""
    job = builders.job(backend, name="test", finished=builders.ago(hours=hours))
    report = TestReport.objects.create(job=job, source="upload", digest=f"{next(_digests):064x}", size=1, store_key="k")
    TestCase.objects.bulk_create(
        TestCase(
            report=report,
            job=job,
            file="test/test_binary_ufuncs.py",
            classname=f"test.test_binary_ufuncs.{ADD[1]}",
            name=ADD[0],
            test_id=ADD_ID,
            status=status,
            reruns=reruns,
        )
        for status, reruns in cases
    )
    return job


RERUN_PASS = ("passed", 2)
PASS, FAIL, SKIP = ("passed", 0), ("failed", 0), ("skipped", 0)


def disable(backend, name: str, **fields) -> DisabledTest:
    entry = DisabledTest(backend=backend, **fields)
    entry.name_set(name)
    entry.save()
    return entry


def test_a_test_flaky_in_3_jobs_within_6_hours_is_a_disable_candidate(npu):
    jobs = [job_with(npu, RERUN_PASS, hours=1), job_with(npu, FAIL, PASS, hours=3), job_with(npu, RERUN_PASS, hours=5)]

    [candidate] = suggest.disable_candidates(npu)

    assert (candidate.name, candidate.test_id, candidate.jobs) == (ADD_NAME, ADD_ID, 3)
    assert candidate.last_job_id == max(j.id for j in jobs)


def test_flaky_in_only_2_jobs_within_6_hours_is_not(npu, make_backend):
    job_with(npu, RERUN_PASS, hours=1)
    job_with(npu, RERUN_PASS, hours=2)
    job_with(npu, RERUN_PASS, hours=7)  # outside the window
    job_with(make_backend("acme/cuda"), RERUN_PASS, hours=1)  # another backend's

    assert suggest.disable_candidates(npu) == []


def test_failing_or_passing_steadily_is_not_flaky(npu):
    for hours in (1, 2, 3):
        job_with(npu, FAIL, hours=hours)
        job_with(npu, PASS, PASS, hours=hours)
        job_with(npu, ("failed", 2), hours=hours)  # failed even after reruns

    assert suggest.disable_candidates(npu) == []


def test_a_test_in_the_registry_is_not_suggested_again_even_expired(npu):
    for hours in (1, 2, 3):
        job_with(npu, RERUN_PASS, hours=hours)
    entry = disable(npu, "test_add_npu_float32 (test_binary_ufuncs.TestBinaryUfuncsPRIVATEUSE1)")
    assert suggest.disable_candidates(npu) == []

    entry.delete()
    disable(npu, ADD_ID, expires_at=builders.ago(days=1))
    assert suggest.disable_candidates(npu) == []


def passing_history(backend, passes: int, *, days: float = 6):
    """``passes`` passing jobs spread over the last ``days``, with skipped ones between (which count neither way)."""
    for i in range(passes):
        job_with(backend, PASS, SKIP, hours=1 + i * (days * 24 - 2) / passes)


@pytest.mark.parametrize("name", [ADD_NAME, ADD_ID])
def test_a_disabled_test_that_passed_150_times_in_7_days_is_a_re_enable_candidate(npu, name):
    entry = disable(npu, name, reason="flaky")
    passing_history(npu, 150)
    job_with(npu, FAIL, hours=8 * 24)  # a failure before the window does not count

    assert [(c.entry, c.passes) for c in suggest.reenable_candidates(npu)] == [(entry, 150)]


def test_149_passes_are_not_enough(npu):
    disable(npu, ADD_NAME)
    passing_history(npu, 149)

    assert suggest.reenable_candidates(npu) == []


def test_a_failure_within_7_days_keeps_it_disabled(npu):
    disable(npu, ADD_NAME)
    passing_history(npu, 200)
    job_with(npu, FAIL, hours=6 * 24)

    assert suggest.reenable_candidates(npu) == []


def test_passes_of_another_class_or_backend_do_not_count(npu, make_backend):
    disable(npu, "test_add_npu_float32 (__main__.TestBinaryUfuncs)")  # PyTorch's runner would match by prefix
    passing_history(npu, 150)
    cuda = make_backend("acme/cuda")
    disable(cuda, ADD_NAME)

    assert suggest.reenable_candidates(npu) == []
    assert suggest.reenable_candidates(cuda) == []


def test_an_expired_entry_is_listed_as_expired_and_not_for_re_enabling(npu):
    old = disable(npu, ADD_NAME, expires_at=builders.ago(hours=1))
    disable(npu, "test_mm (__main__.TestLinalg)", expires_at=timezone.now() + timedelta(days=1))
    disable(npu, "test_sort (__main__.TestSort)")
    passing_history(npu, 150)

    assert suggest.expired(npu) == [old]
    assert suggest.reenable_candidates(npu) == []
