"""Test-report benchmark: parse rate per worker, and a 10,000-case report on the job page after its callback.

Run: .venv/bin/pytest -s -p no:xdist tests/bench/bench_test_reports.py   (prints figures)

1. Parse rate: a 100,000-case pytest-style JUnit file (1 % failing, some reruns) through ootci.reports.junit on one
   process, as a zip and as plain XML. Goal >= 50,000 cases/s per worker.
2. Visible: the completed callback of a GitHub Actions job, its 10,000-case artifact pulled from the fake GitHub
   (302 and zip over real HTTP), stored, parsed (tasks inline, as an idle worker runs them at once) and the job
   page rendering its failed tests; p50/p95 over 10 runs. Goal p95 <= 5 s.
3. Storage per million parsed cases: 100 jobs each running the same 10,000 tests (1 % failing, 2.5 % skipped), as
   PyTorch's suites do. PostgreSQL keeps the reports and every case (TestCase, passes too); ClickHouse
   (chdb, merged) keeps every case in `oot_test_case`, copied from the raw reports (copy rate printed too).
"""

import io
import statistics
import time

import pytest
import requests
from django.db import connection

from hud import tasks
from hud.stores.clickhouse import connection as clickhouse
from hud.stores.clickhouse import copy_cases
from ootci.models import JobResult, TestCase
from ootci.reports import junit
from relay.reports import pull
from tests.hud import builders
from tests.relay.conftest import app_key, fake_github  # noqa: F401
from tests.relay.report_files import zipped

pytestmark = pytest.mark.django_db(transaction=True)


def big_report(cases: int) -> bytes:
    rows = []
    for i in range(cases):
        name = f'classname="test_ops.TestCommonPRIVATEUSE1" name="test_op_{i}_npu_float32" time="0.01"'
        if i % 100 == 7:
            rows.append(f"<testcase {name}><rerun/><failure message='AssertionError {i}'>Traceback\n...</failure>")
            rows.append("</testcase>")
        elif i % 40 == 3:
            rows.append(f'<testcase {name}><skipped type="pytest.skip" message="not on npu"/></testcase>')
        else:
            rows.append(f"<testcase {name}/>")
    suite = f'<testsuite name="pytest">{"".join(rows)}</testsuite>'
    return f'<?xml version="1.0"?><testsuites>{suite}</testsuites>'.encode()


def test_parse_rate_per_worker():
    data = big_report(100_000)
    for label, body in (("xml", data), ("zip", zipped({"r/test_ops.xml": data}))):
        best = 0.0
        for _ in range(3):
            start = time.perf_counter()
            parsed = junit.report_parse(io.BytesIO(body), compressed_size=len(body), device="npu")
            best = max(best, parsed.cases / (time.perf_counter() - start))
        print(f"\nparse rate ({label}, {len(body) / 1e6:.1f} MB): {best:,.0f} cases/s per worker (goal >= 50,000)")
        assert parsed.cases == 100_000


def test_a_10000_case_report_is_on_the_job_page_after_its_callback(downstream, fake_github, settings, tmp_path):  # noqa: F811
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    ci = downstream()
    artifact = zipped({"test-reports/test_ops.xml": big_report(10_000)})
    times = []
    for n in range(10):
        run_id = 1000 + n
        fake_github.artifact_add(ci.repo, run_id, name="test-reports-test-npu-float32", data=artifact)
        dispatch = ci.dispatch()
        body = ci.body("pull_request.completed.failure", dispatch, run_id=str(run_id), artifact_url="")
        start = time.perf_counter()
        assert ci.post(body).status_code == 200
        job = JobResult.objects.get(dispatch=dispatch)
        page = requests.get(f"{ci.url.removesuffix('/github/callback')}/oot/{ci.repo}/jobs/{job.pk}/", timeout=30)
        times.append(time.perf_counter() - start)
        assert "Failed and errored tests (100)" in page.text
    times.sort()
    p95 = times[int(0.95 * (len(times) - 1))]
    print(f"\n10,000-case report visible on the job page: p50 {statistics.median(times):.2f} s, p95 {p95:.2f} s")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size('ootci_testcase')")
        size = cursor.fetchone()[0]
    rows = TestCase.objects.count()
    per_million = size / (10 * 10_000) * 1_000_000
    print(f"PostgreSQL: {rows} stored cases of 100,000 parsed, {size / 1e6:.1f} MB; {per_million / 1e6:.0f} MB/million")


def test_storage_per_million_cases_in_postgresql_and_clickhouse(make_backend, settings, tmp_path):
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    settings.CLICKHOUSE_URL = ""  # parse first, then copy in one run and time it
    backend = make_backend(repo="acme/npu", level="L2", device="npu")
    report = big_report(10_000)
    for n in range(100):
        job = builders.job(backend, name="test", conclusion="failure", finished=builders.ago(minutes=n))
        received = pull.spooled(io.BytesIO(report), limit=10**8)
        pull.report_store(job=job, received=received, source="upload")  # parsed on commit (Q_SYNC)
    stored = TestCase.objects.count()
    assert stored == 100 * 10_000  # every case, passes too: the per-test history and daily roll-up read them

    settings.CLICKHOUSE_URL = f"chdb://{tmp_path / 'clickhouse'}"
    start = time.perf_counter()
    tasks.clickhouse_replicate()
    took = time.perf_counter() - start
    with clickhouse.session():
        clickhouse.command(f"OPTIMIZE TABLE {copy_cases.TABLE} FINAL")
        [(rows, compressed, raw)] = clickhouse.rows(
            "SELECT sum(rows), sum(data_compressed_bytes), sum(data_uncompressed_bytes) FROM system.parts"
            " WHERE database = currentDatabase() AND table = {t:String} AND active",
            {"t": copy_cases.TABLE},
        )
    assert rows == 1_000_000
    print(f"\nClickHouse copy: {rows:,} cases in {took:.1f} s ({rows / took:,.0f} cases/s, re-parse included)")
    print(f"ClickHouse oot_test_case: {compressed / 1e6:.1f} MB compressed ({raw / 1e6:.0f} MB raw) per million cases")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size('ootci_testcase') + pg_total_relation_size('ootci_testreport')")
        size = cursor.fetchone()[0]
    print(f"PostgreSQL TestCase + TestReport: {size / 1e6:.1f} MB per million parsed cases ({stored:,} rows stored)")
