"""Hand-built per-test histories for the test search and test page (figures in the docstring).

Test ADD = test_ops.py::TestOps::test_add (reports arrive at the times below; s1…s5 are upstream SHAs):

acme/npu (L2)    s0 push -10d passed (outside 7 days) · s1 push -6d passed · s2 PR 11 -5d passed · s3 nightly -4d
                 FAILED (first failure after the last pass) · s4 PR 12 -3d skipped, then attempt 2 -3d+1h FAILED after 2
                 pytest reruns · s5 nightly -1d ERROR "RuntimeError: last one" (its last failure)
                 7 days: passed 2, failed 3, skipped 1 → pass rate 40.0 %, failing since s3 after a pass
intel/xpu (L3)   s0 push -10d passed · s3 -4d FAILED · s5 -1d FAILED
                 7 days: 0 of 2 → 0.0 %, failing since s3, never passed in the window (30 days: after the s0 pass)
quiet/mps (L2)   s3 -4d FAILED · s5 -1d passed → 50.0 %, passing now, last failure at s3

Columns over 7 days, newest first: s5, s4 (PR 12), s3, s2 (PR 11), s1. Cell npu×s4 = X with 2 results, 2 reruns.

Search: test_ops.py::TestOps::test_addmm FAILED once -3d on npu (in s4's attempt 2 report);
test_nn.py::TestNN::test_ADD_layer passed only; "add" finds test_add (failed -1d), test_addmm (-3d), then
test_ADD_layer. A report of 120 passing bulk tests and one failing one pages: "bulk" → 50 + 50 + 21, the
failing one first, then by code point (B before a).
"""

from dataclasses import dataclass

from ootci.models import Backend
from tests.hud.builders import ago, job, report_with

ADD = "test_ops.py::TestOps::test_add"
ADDMM = "test_ops.py::TestOps::test_addmm"
LAYER = "test_nn.py::TestNN::test_ADD_layer"
S = {n: f"{n}" * 40 for n in "012345"}


@dataclass
class History:
    npu: Backend
    xpu: Backend
    mps: Backend
    jobs: dict  # (backend device, sha name, attempt) → JobResult


def build(make_backend) -> History:
    npu = make_backend("acme/npu", "L2", device="npu")
    xpu = make_backend("intel/xpu", "L3", device="xpu")
    mps = make_backend("quiet/mps", "L2", device="mps")
    jobs: dict = {}

    def run(backend, sha: str, cases: dict, *, days: float, event: str = "nightly", pr=None, attempt: int = 1):
        found = job(
            backend,
            name="test",
            conclusion="failure" if any("passed" not in str(v) for v in cases.values()) else "success",
            event_type=event,
            pr_number=pr,
            head_sha=S[sha],
            run_attempt=attempt,
            run_id=f"{backend.device}-{sha}",
            finished=ago(days=days),
        )
        jobs[backend.device, sha, attempt] = found
        report_with(found, cases, at=ago(days=days))

    add = "test_ops.TestOps::test_add"
    run(npu, "0", {add: "passed"}, days=10, event="push")
    run(xpu, "0", {add: "passed"}, days=10, event="push")
    run(npu, "1", {add: "passed", "test_nn.TestNN::test_ADD_layer": "passed"}, days=6, event="push")
    run(npu, "2", {add: "passed"}, days=5, event="pull_request", pr=11)
    for backend in (npu, xpu, mps):
        run(backend, "3", {add: "failed"}, days=4)
    run(npu, "4", {add: "skipped"}, days=3, event="pull_request", pr=12)
    run(
        npu,
        "4",
        {add: ("failed", 2), "test_ops.TestOps::test_addmm": "failed"},
        days=3 - 1 / 24,
        event="pull_request",
        pr=12,
        attempt=2,
    )
    run(npu, "5", {add: ("error", 0, "RuntimeError: last one")}, days=1)
    run(xpu, "5", {add: "failed"}, days=1)
    run(mps, "5", {add: "passed"}, days=1)
    bulk = {f"test_bulk.TestBulk::test_{i:03d}": "passed" for i in range(118)}
    bulk |= {"test_bulk.TestBulk::test_a": "passed", "test_bulk.TestBulk::test_B": "passed"}
    bulk["test_bulk.TestBulk::test_zz_fails"] = "failed"
    run(mps, "2", bulk, days=2, event="push")
    return History(npu, xpu, mps, jobs)
