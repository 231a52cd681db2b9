"""Verdict benchmark (issue 25): a generated history with planted causes, and what the verdicts decide from it.

1. Accuracy per class. An L4 backend runs 60 tests nightly for 20 days, then 40 pull requests. Planted: each PR
   breaks one stable test (truth: new); 10 tests fail at a known rate of 30 % on every run (flaky); 5 tests broke on
   the nightly 3 days before the PRs (broken-baseline); 8 PR jobs die with an infra failure and no report (infra).
   Every failing test of every PR job is given its verdict by ``ootci.baseline`` (what the check runs, the PR comment
   and the pages read) from reports parsed by the relay's own parser. Goal: >= 95 % right per class, and no job
   with a planted new failure exonerated.
2. The relay's own re-runs and the check run's update. 20 L4 PR jobs fail over real HTTP: 14 of infra (a disk that
   filled: transient, the re-run succeeds 4 times in 5), 6 with failed tests (their report uploaded before the
   completed callback, as non-GitHub CI does). Goal: every infra failure re-run with
   no human, none of the test failures; >= 50 % of the infra failures green after the re-run; the check run
   concluded p95 <= 5 s after the completed callback.

Figures are printed; the goals are asserted.
"""

import random
import statistics
import time
from collections import Counter, defaultdict

import pytest
import requests

from ootci import baseline
from ootci.models import JobFailure, JobResult
from tests.hud import builders
from tests.hud.failing_history import History, generic_id, pushed
from tests.relay.report_files import junit_xml

pytestmark = pytest.mark.django_db(transaction=True)

TESTS = [f"t{n:02d}" for n in range(60)]
STABLE, FLAKY, BROKEN = TESTS[:40], TESTS[40:50], TESTS[50:55]
FLAKY_RATE = 0.3
NIGHTLIES, PRS, INFRA_JOBS = 20, 40, 8


def nightly_statuses(rng: random.Random, day: int) -> dict[str, str]:
    statuses = dict.fromkeys(TESTS, "passed")
    statuses |= {t: "failed" for t in FLAKY if rng.random() < FLAKY_RATE}
    if day >= NIGHTLIES - 3:
        statuses |= dict.fromkeys(BROKEN, "failed")
    return statuses


@pytest.mark.parametrize("seed", [25, 26, 27])  # three generated histories: the threshold was set on the first
def test_verdicts_against_the_planted_causes(
    seed, settings, tmp_path, django_capture_on_commit_callbacks, make_backend
):
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    history = History(django_capture_on_commit_callbacks)
    backend = make_backend(repo="acme/npu", level="L4", device="npu")
    rng = random.Random(seed)
    shas = [f"{day:040x}" for day in range(NIGHTLIES)]
    for day, sha in enumerate(shas):
        history.baseline(backend, nightly_statuses(rng, day), sha=sha, hours=24 * (NIGHTLIES - day) + 5)
    truth: dict[tuple[int, str], str] = {}
    planted_new: set[int] = set()
    infra_at = set(rng.sample(range(PRS), INFRA_JOBS))
    for n in range(PRS):
        pr = builders.pull_request(1000 + n, f"{1000 + n:040x}")
        pushed(pr, base=shas[-1], hours=4, sha=pr.head_sha)
        if n in infra_at:
            job = builders.job(
                backend,
                name="ut",
                conclusion="failure",
                event_type="pull_request",
                pr_number=pr.number,
                head_sha=pr.head_sha,
                finished=builders.ago(hours=1),
            )
            JobFailure.objects.create(job=job, failure_class="infra", line="No space left on device")
            JobResult.objects.filter(pk=job.pk).update(failure_class="infra")
            truth[job.pk, ""] = "infra"
            continue
        statuses = nightly_statuses(rng, NIGHTLIES)
        broken = rng.choice(STABLE)
        statuses[broken] = "failed"
        job = history.pr_job(backend, pr, statuses, sha=pr.head_sha, hours=1)
        planted_new.add(job.pk)
        for t, status in statuses.items():
            if status == "failed":
                truth[job.pk, generic_id(t)] = "new" if t == broken else "flaky" if t in FLAKY else "broken-baseline"

    jobs = list(JobResult.objects.filter(event_type="pull_request").select_related("backend"))
    started = time.perf_counter()
    found = baseline.jobs_verdicts(jobs)
    took = time.perf_counter() - started
    right, total = Counter(), Counter()
    confused = defaultdict(Counter)
    for (job_id, test), want in truth.items():
        verdict = found[job_id]
        got = verdict.verdict if not test else next(t.verdict for t in verdict.tests if t.test_id == test)
        total[want] += 1
        right[want] += got == want
        if got != want and test:
            evidence = next(t.evidence for t in verdict.tests if t.test_id == test)
            print(f"  {test} planted {want}, said {got}: {evidence}")
        confused[want][got] += 1
    exonerated_new = 0
    for job in jobs:
        if job.pk in planted_new and baseline.check_run_decision(job, conclusion="failure").conclusion != "failure":
            exonerated_new += 1
    planted = sum(total.values())
    print(f"\nseed {seed}: verdicts of {len(jobs)} PR jobs, {planted} planted failures in {took * 1000:.0f} ms")
    for want in ("new", "flaky", "broken-baseline", "infra"):
        share = 100 * right[want] / total[want]
        print(f"  {want:16} {right[want]:3} of {total[want]:3} right ({share:.1f} %, goal >= 95 %):", end=" ")
        print(dict(confused[want]))
    print(f"  jobs with a planted new failure exonerated: {exonerated_new} (goal 0)")
    assert all(right[w] >= 0.95 * total[w] for w in total) and exonerated_new == 0


DISK_FULL = (
    b"2026-03-01T10:00:02.0000000Z ##[group]Run python test/run_test.py\n"
    b"2026-03-01T10:00:02.5000000Z ##[endgroup]\n"
    b"2026-03-01T10:00:03.0000000Z OSError: [Errno 28] No space left on device: '/tmp/torch_extensions'\n"
    b"2026-03-01T10:00:05.0000000Z ##[error]Process completed with exit code 1.\n"
)


def test_infra_failures_are_re_run_by_the_relay_and_check_runs_conclude_fast(
    tmp_path,
    downstream,
    failing_run,
    fake_github,
    settings,
):
    settings.UPSTREAM_REPO = "pytorch/pytorch"
    settings.VERDICT_WAIT_SECONDS = 120
    settings.AUTO_RETRY_OUTAGE_JOBS = 100  # one failure per event here: no outage
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    ci = downstream("L4", device="npu")
    rng = random.Random(30)
    kinds = ["infra"] * 14 + ["test"] * 6
    rng.shuffle(kinds)
    latencies, green = [], 0
    for n, kind in enumerate(kinds):
        run_id = 24_000_000_000 + n
        url = f"https://github.com/{ci.repo}/actions/runs/{run_id}"
        failing_run(
            ci.repo,
            run_id=run_id,
            log=DISK_FULL
            if kind == "infra"
            else None
            or DISK_FULL.replace(
                b"OSError: [Errno 28] No space left on device: '/tmp/torch_extensions'", b"AssertionError: 1 != 2"
            ),
        )
        dispatch = ci.dispatch()
        fields = {"url": url, "run_id": str(run_id), "job_name": "test-npu", "run_attempt": 1}
        if kind == "test":  # in_progress, then its report (parsed at once), then completed: non-GitHub CI's order
            fields["test_results"] = {"passed": 10, "failed": 1, "failed_tests": [f"test_x.py::TestX::t{n}"]}
            assert ci.post(ci.body("pull_request.in_progress", dispatch, **fields)).status_code == 200
            job = JobResult.objects.get(run_id=str(run_id))
            query = {"delivery_id": job.delivery_id, "workflow": job.workflow_name, "job": job.job_name}
            query |= {"run_id": job.run_id, "run_attempt": 1}
            token = {"Authorization": f"Bearer {ci.issuer.token(repository=ci.repo)}"}
            uploaded = requests.post(
                ci.url.replace("/github/callback", "/github/test-report"),
                params=query,
                data=junit_xml(passed=10, failed=1),
                headers=token | {"Content-Type": "application/xml"},
                timeout=30,
            )
            assert uploaded.status_code == 202, uploaded.text
        before = len(fake_github.requests_to("PATCH", r"/repos/pytorch/pytorch/check-runs/\d+"))
        started = time.perf_counter()
        assert ci.post(ci.body("pull_request.completed.failure", dispatch, **fields)).status_code == 200
        patches = fake_github.requests_to("PATCH", r"/repos/pytorch/pytorch/check-runs/\d+")[before:]
        creates = fake_github.requests_to("POST", r"/repos/pytorch/pytorch/check-runs")
        concluded = [r for r in patches + creates[-1:] if r.json.get("conclusion")]
        assert concluded, f"job {n} ({kind}): no conclusion"
        latencies.append(time.perf_counter() - started)
        rerun = fake_github.requests_to("POST", rf"/repos/.*/actions/runs/{run_id}/rerun-failed-jobs")
        assert len(rerun) == (1 if kind == "infra" else 0), (n, kind)
        if rerun:  # the downstream runs the failed job again: the disk was cleaned 4 times in 5
            conclusion = "success" if rng.random() < 0.8 else "failure"
            ci.post(
                ci.body(
                    "pull_request.completed.failure",
                    dispatch,
                    **(fields | {"run_attempt": 2, "conclusion": conclusion}),
                )
            )
            green += JobResult.objects.filter(run_id=str(run_id), run_attempt=2, conclusion="success").exists()
    infra = kinds.count("infra")
    p95 = statistics.quantiles(latencies, n=20)[-1]
    print(f"\ninfra failures re-run by the relay: {infra} of {infra}; test failures re-run: 0 of {kinds.count('test')}")
    print(
        f"infra failures green after the relay's re-run, no human: {green} of {infra} ({100 * green / infra:.0f} %,"
        " goal >= 50 %)"
    )
    print(
        f"check run concluded after the completed callback: p50 {statistics.median(latencies) * 1000:.0f} ms, "
        f"p95 {p95 * 1000:.0f} ms (goal <= 5 s)"
    )
    assert green >= 0.5 * infra and p95 <= 5.0
