"""One hand-counted backend history used by the page and API tests (figures in the docstring).

Backend acme/npu (L2), pull_request jobs:

PR 101, head sha A, dispatched 3 days ago:
  ci/build  attempt 1 failure without tests, attempt 2 success (re-run)  → success (counted once)
  ci/test   failure with failed test test_a                              → test failure
  ci/lint   cancelled                                                    → infra
  ci/long   timed_out                                                    → infra (timed out)
  ci/skip   skipped                                                      → not counted
  ci/run    in_progress                                                  → running
  ci/docs   success, in_progress callback lost (no started_at)          → success, at its completion
PR 102, sha B: ci/build success 10 days ago                              → only in 30-day windows
PR 103, sha C: dispatched 8 hours ago, never called back                 → lost = infra
PR 104, sha D: dispatched 1 hour ago, no report yet                      → waiting (not counted)
push, sha E: ci/build success; nightly, sha F: nightly/full failure with tests (own views).

7 days, pull_request: successes 2, test failures 1, infra 3 (1 lost, 1 timed out), total 6, pass rate 33.3 %,
running 1, skipped 1; queue times of latest attempts 60, 120, 180, 240 → median 150, p90 222;
execution times 100, 200, 300, 400 → median 250. 30 days: successes 3, total 7, pass rate 42.9 %.
"""

from dataclasses import dataclass

from ootci.models import Backend, JobResult
from tests.hud.builders import ago, dispatch, job, pull_request

A, B, C, D, E, F = ("a" * 40, "b" * 40, "c" * 40, "d" * 40, "e" * 40, "f" * 40)


@dataclass
class Scenario:
    backend: Backend
    rerun: JobResult
    first_attempt: JobResult
    test_failure: JobResult
    nightly: JobResult


def build() -> Scenario:
    acme = Backend.objects.create(repo="acme/npu", level="L2", device="npu", oncalls=["ann", "bo"])
    pr101 = pull_request(101, A, title="Fix index_put", labels=["ciflow/oot/npu"])
    d101 = dispatch(acme, sha=A, at=ago(days=3), pr=pr101)
    first = job(acme, name="build", conclusion="failure", finished=ago(days=2, hours=23), dispatch_=d101, run_id="77")
    rerun = job(
        acme, name="build", finished=ago(days=2), dispatch_=d101, run_id="77", run_attempt=2, execution_time=100
    )
    failing = job(
        acme,
        name="test",
        conclusion="failure",
        finished=ago(days=2),
        dispatch_=d101,
        failed_tests=["test/test_ops.py::test_a"],
        passed=10,
        failed=1,
        skipped=0,
        queue_time=60,
        execution_time=200,
    )
    job(
        acme,
        name="lint",
        conclusion="cancelled",
        finished=ago(days=2),
        dispatch_=d101,
        queue_time=120,
        execution_time=300,
    )
    job(
        acme,
        name="long",
        conclusion="timed_out",
        finished=ago(days=2),
        dispatch_=d101,
        queue_time=180,
        execution_time=400,
    )
    job(acme, name="skip", conclusion="skipped", finished=ago(days=2), dispatch_=d101)
    job(acme, name="run", conclusion="", finished=ago(hours=1), dispatch_=d101, queue_time=240)
    job(acme, name="docs", finished=ago(days=1), dispatch_=d101, started_at=None, one_shot=True)
    pr102 = pull_request(102, B, title="Old change")
    job(acme, name="build", finished=ago(days=10), dispatch_=dispatch(acme, sha=B, at=ago(days=10, hours=1), pr=pr102))
    dispatch(acme, sha=C, at=ago(hours=8), pr=pull_request(103, C, title="Lost change"))
    dispatch(acme, sha=D, at=ago(hours=1), pr=pull_request(104, D, title="Fresh change"))
    job(
        acme, name="build", finished=ago(days=1), dispatch_=dispatch(acme, sha=E, at=ago(days=1, hours=1), event="push")
    )
    nightly = job(
        acme,
        name="full",
        workflow_name="nightly",
        conclusion="failure",
        finished=ago(days=1),
        head_sha=F,
        failed_tests=["test_b"],
        failed=1,
        passed=5,
    )
    return Scenario(acme, rerun, first, failing, nightly)
