"""What keeping the failing tests' history at parse time (``ootci.case_recent``, TestRecent) costs a parse:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ootci_recentbench \\
        .venv/bin/pytest -s -p no:xdist -p no:cacheprovider tests/bench/bench_case_recent.py

A nightly shard's report of CASES tests (1 % failing, 1 % skipped) parsed ROUNDS + HISTORY times on one backend, each a
new job's report arriving after the one before, so that the rows are full (HISTORY results each) when the rounds are
timed. Printed: the report stored and parsed (``relay.reports.pull``: stored, read, parsed, cases written, both
roll-ups) and the history's merge alone (``recent_add``, timed inside the parse), medians. Goal: the merge at most a
third of the parse (asserted with a margin: under 0.33 / 0.8 of it).
"""

import io
import statistics
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from ootci import case_recent
from ootci.models import TestRecent, TestReport
from ootci.verdicts import HISTORY
from relay.reports import pull
from tests.hud import builders

CASES = 10_000
ROUNDS = 5
SHARE = 0.33
MARGIN = 0.8

pytestmark = pytest.mark.django_db(transaction=True)


def report(n: int) -> bytes:
    rows = []
    for i in range(CASES):
        name = f'classname="test_ops.TestOps" name="test_op_{i}" time="0.01"'
        if (i + n) % 100 == 7:
            rows.append(f'<testcase {name}><failure message="AssertionError: x">AssertionError: x</failure></testcase>')
        elif i % 100 == 9:
            rows.append(f'<testcase {name}><skipped message="not here"/></testcase>')
        else:
            rows.append(f"<testcase {name}/>")
    body = f'<testsuites><testsuite name="pytest">{"".join(rows)}</testsuite></testsuites>'
    return b'<?xml version="1.0"?>' + body.encode()


def test_the_history_merge_costs_a_fraction_of_the_parse(settings, tmp_path, make_backend):
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    npu = make_backend("bench/npu", "L2", device="npu")
    start = timezone.now() - timedelta(days=30)
    merges: list[float] = []
    timed = case_recent.recent_add

    def recent_add(report: TestReport) -> int:
        began = time.perf_counter()
        written = timed(report)
        merges.append(time.perf_counter() - began)
        return written

    case_recent.recent_add = recent_add
    parses = []
    try:
        for n in range(HISTORY + ROUNDS):
            at = start + timedelta(hours=n)
            job = builders.job(npu, name="test-1", event_type="nightly", head_sha=f"{n:040x}", finished=at)
            received = pull.spooled(io.BytesIO(report(n)), limit=10**9)
            began = time.perf_counter()  # stored, then parsed at its commit (tasks run inline here)
            stored, _ = pull.report_store(job=job, received=received, source="upload")
            assert pull.report_parse(report_id=stored.pk) == "parsed"
            parses.append(time.perf_counter() - began)
    finally:
        case_recent.recent_add = timed

    assert TestRecent.objects.count() == CASES - CASES // 100  # the skipped tests count nowhere
    assert all(len(r) == HISTORY for r in TestRecent.objects.values_list("results", flat=True)[:50])
    parse, merge = statistics.median(parses[-ROUNDS:]), statistics.median(merges[-ROUNDS:])
    print(
        f"\n{CASES:,}-case nightly report, rows full ({HISTORY} results), median of {ROUNDS}: "
        f"parse {1000 * parse:.0f} ms ({CASES / parse:,.0f} cases/s), of which the history merge {1000 * merge:.0f} ms "
        f"({100 * merge / parse:.0f} %); the first parse (no rows yet): {1000 * parses[0]:.0f} ms, "
        f"merge {1000 * merges[0]:.0f} ms"
    )
    assert merge < SHARE / MARGIN * parse
