"""Skip-ledger benchmark (issue 29).

1. The diff of two 10,000-test baseline reports (``ootci.ledger.ledger_record``: the later run's cases against the
   previous run's, per-file counts, its rows written): goal ≤ 1 s; and the later run on the coverage JSON after its
   report's parse (the parse's on-commit task, run inline): goal within a minute.
2. The coverage page and its JSON on 90 days × 12 backends × 10,000 tests (200 files of 50 tests; one nightly job a
   backend a day; the ledger rows written directly, as the parse would leave them): goal < 300 ms.
"""

import random
import statistics
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from ootci import ledger
from ootci.models import JobResult, LedgerFile, LedgerRun
from relay.reports import pull
from tests.hud import builders

pytestmark = pytest.mark.django_db

TESTS, FILES = 10_000, 200


@pytest.fixture(autouse=True)
def store(settings, tmp_path):
    settings.TEST_REPORTS_URL = (tmp_path / "reports").as_uri()


def cases(rng: random.Random, skipped: float) -> dict[str, str]:
    found = {}
    for i in range(TESTS):
        roll = rng.random()
        status = "skipped" if roll < skipped else "failed" if roll < skipped + 0.01 else "passed"
        found[f"test_file{i % FILES}.TestX::test_{i}"] = status
    return found


def test_the_diff_of_two_10000_test_reports_and_the_page_after_the_parse(
    make_backend, client, django_capture_on_commit_callbacks
):
    rng = random.Random(29)
    backend = make_backend("bench/npu")
    first = builders.job(backend, name="test", head_sha="a" * 40, finished=builders.ago(days=1))
    builders.report_with(first, cases(rng, 0.20))
    ledger.ledger_record(job_id=first.pk)
    second = builders.job(backend, name="test", head_sha="b" * 40, finished=builders.ago(hours=1))
    later = cases(rng, 0.21)
    took = []
    for _ in range(5):
        report = builders.report_with(second, later) if not took else None
        began = time.perf_counter()
        run = ledger.ledger_record(job_id=second.pk)
        took.append(time.perf_counter() - began)
        assert report is None or run.previous_id == first.pk
    # The whole path: the parse of the later report (again), its on-commit ledger task, then the JSON shows it.
    report = second.test_reports.get()
    type(report).objects.filter(pk=report.pk).update(state="pending")
    with django_capture_on_commit_callbacks(execute=True):
        assert pull.report_parse(report_id=report.pk) == "parsed"
        parsed_at = time.perf_counter()
    shown = client.get("/api/oot/bench/npu/coverage/").json()
    on_page = time.perf_counter() - parsed_at
    assert shown["runs"][0]["job_id"] == second.pk and shown["changes"][0]["started_skipping"] == run.started_skipping
    median = statistics.median(took)
    print(
        f"\nledger diff of two {TESTS:,}-test reports ({run.started_skipping} started skipping, "
        f"{run.stopped_skipping} stopped): median {1000 * median:.0f} ms, max {1000 * max(took):.0f} ms (goal 1 s); "
        f"on the coverage JSON {on_page:.2f} s after the later report's parse ended (goal 60 s)"
    )
    assert median < 0.8 and on_page < 30  # the goals (1 s, 60 s) with a margin


def ledger_rows(backends, *, days: int, rng: random.Random) -> None:
    now = timezone.now()
    runs, files = [], []
    for backend in backends:
        skipped = [rng.randint(5, 15) for _ in range(FILES)]
        for d in range(days, 0, -1):
            at = now - timedelta(days=d, hours=rng.randint(0, 5))
            job = JobResult(
                backend=backend,
                delivery_id=f"{d:040d}",
                event_type="nightly",
                upstream_repo="pytorch/pytorch",
                head_sha=f"{d:040d}",
                workflow_name="ci",
                job_name="test",
                run_id=str(d),
                status="completed",
                conclusion="success",
                completed_at=at,
                started_at=at - timedelta(hours=1),
                created_at=at - timedelta(hours=1),
            )
            skipped = [max(0, min(50, s + rng.randint(-1, 2))) for s in skipped]
            started = rng.randint(0, 40)
            ids = [f"test_file{rng.randrange(FILES)}.py::TestX::test_{rng.randrange(TESTS)}" for _ in range(started)]
            runs.append((job, skipped, started, ids, at))
    JobResult.objects.bulk_create([r[0] for r in runs], batch_size=2000)
    rows = [
        LedgerRun(
            job=job,
            backend_id=job.backend_id,
            workflow_name="ci",
            job_name="test",
            sha=job.head_sha,
            finished_at=at,
            day=at.date(),
            collected=TESTS,
            passed=TESTS - sum(skipped),
            skipped=sum(skipped),
            started_skipping=started,
            changes={"started_skipping": ids},
        )
        for job, skipped, started, ids, at in runs
    ]
    LedgerRun.objects.bulk_create(rows, batch_size=2000)
    for run, (_, skipped, *_rest) in zip(rows, runs, strict=True):
        files += [
            LedgerFile(
                run=run, backend_id=run.backend_id, file=f"test_file{f}.py", collected=50, passed=50 - s, skipped=s
            )
            for f, s in enumerate(skipped)
        ]
    LedgerFile.objects.bulk_create(files, batch_size=10_000)


def test_the_coverage_page_on_90_days_of_12_backends(make_backend, client):
    backends = [make_backend(f"bench/b{n:02d}") for n in range(12)]
    ledger_rows(backends, days=90, rng=random.Random(290))
    timings = {}
    for name, url in (("page", "/oot/bench/b03/coverage/"), ("JSON", "/api/oot/bench/b03/coverage/")):
        assert client.get(url).status_code == 200  # warm-up
        took = []
        for _ in range(5):
            began = time.perf_counter()
            response = client.get(url)
            took.append(time.perf_counter() - began)
            assert response.status_code == 200
        timings[name] = statistics.median(took)
    print(
        f"\ncoverage of 12 backends × 90 days × {TESTS:,} tests ({LedgerRun.objects.count():,} runs, "
        f"{LedgerFile.objects.count():,} file rows): page median {1000 * timings['page']:.0f} ms, "
        f"JSON median {1000 * timings['JSON']:.0f} ms (goal < 300 ms)"
    )
    assert timings["page"] < 0.24 and timings["JSON"] < 0.24  # the goal with a 20 % margin
