"""The failing-tests classification's history (``ootci.models.TestRecent``): per backend and test, the newest HISTORY
counted results (passed or failing) of the cases of the parsed reports of the backend's nightly and push runs,
newest first by report arrival, report, then case (case ids follow the report's order).

The PR page classifies a dozen backends' failing tests at once; reading their last results from every case of each
test cost 70 ms on PostgreSQL at 1,000,000 cases and 200 ms on ClickHouse at 10,000,000, one row per (backend, test)
here. It changes in the transaction that changes which cases count, so it always equals them:

- a report of a nightly or push run parsed (``relay.reports.pull``: only ever from pending) has its cases merged into
  its backend's rows (``recent_add``), by arrival time, so that a report arriving late does not pass newer ones;
- parsed reports taken back (a re-parse marks them pending, ``relay.reports.reparse``; a job deleted in the admin
  takes its reports' cases along) have their tests' rows read again from the cases that still count
  (``recent_keys`` before, ``recent_recount`` after).

A parse merges in one statement on PostgreSQL (``MERGE``), in Python on SQLite (the embedded default). On PostgreSQL
both take a transaction lock per backend first (before ``ootci.case_days``' day locks, in every writer): a re-parse
reads rows a parse of the same backend writes. SQLite writes one transaction at a time.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.db.models import F, Q, Window
from django.db.models.functions import RowNumber

from ootci.models import JobResult, TestCase, TestRecent, TestReport
from ootci.verdicts import BASELINE_EVENTS, HISTORY

LOCK_CLASS = 47  # pg_advisory_xact_lock's first key: the migration that made the table, apart from other locks
BATCH = 2000
COUNTED = (TestCase.Status.PASSED, *TestCase.FAILING)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def _in(statuses: Iterable[str]) -> str:
    return "(" + ", ".join(f"'{s}'" for s in statuses) + ")"


def _key(results: str, index: str) -> str:
    """The ordering key (arrival, report, case) of entry ``index`` of a results array, as a row."""
    return f"ROW(({results}->{index}->>0)::bigint, ({results}->{index}->>1)::bigint, ({results}->{index}->>2)::bigint)"


# PostgreSQL: a report's counted cases, each test's newest first, merged into its row in one statement. A report newer
# than every result a row holds (the usual nightly) goes in front and the array is cut; one arriving late is sorted in.
MERGE = f"""
INSERT INTO ootci_testrecent (backend_id, test_id, results)
SELECT %(backend)s::bigint, test_id,
       jsonb_path_query_array(
           jsonb_agg(jsonb_build_array(%(at)s::bigint, %(report)s::bigint, id, status, reruns, %(job)s::bigint,
                                       %(sha)s::text) ORDER BY id DESC),
           '$[0 to {HISTORY - 1}]')
FROM ootci_testcase
WHERE report_id = %(report)s AND status IN {_in(COUNTED)}
GROUP BY test_id
ORDER BY test_id
ON CONFLICT (backend_id, test_id) DO UPDATE SET results = CASE
    WHEN jsonb_array_length(ootci_testrecent.results) = 0
         OR {_key("excluded.results", "-1")} > {_key("ootci_testrecent.results", "0")}
    THEN jsonb_path_query_array(excluded.results || ootci_testrecent.results, '$[0 to {HISTORY - 1}]')
    ELSE (SELECT jsonb_agg(e ORDER BY (e->>0)::bigint DESC, (e->>1)::bigint DESC, (e->>2)::bigint DESC)
          FROM (SELECT e FROM jsonb_array_elements(excluded.results || ootci_testrecent.results) AS e
                ORDER BY (e->>0)::bigint DESC, (e->>1)::bigint DESC, (e->>2)::bigint DESC
                LIMIT {HISTORY}) AS kept)
END
"""


def micros(moment: datetime) -> int:
    return (moment.astimezone(UTC) - EPOCH) // MICROSECOND


def moment(at: int) -> datetime:
    return EPOCH + at * MICROSECOND


def entry(at: datetime, report_id: int, case_id: int, status: str, reruns: int, job_id: int, sha: str) -> list:
    """One result as a row's ``results`` holds it; the first three order the list."""
    return [micros(at), report_id, case_id, status, reruns, job_id, sha]


def as_result(e: list) -> dict:
    """A result as the case stores' ``history`` gives it (``hud.stores.base.CaseRows``)."""
    return {"status": e[3], "reruns": e[4], "job_id": e[5], "job_sha": e[6], "at": moment(e[0])}


def recent_add(report: TestReport) -> int:
    """Merge the counted cases of ``report``, just parsed, into its backend's rows (in the parse's transaction);
    a report of another event counts nowhere. Returns the rows written."""
    backend_id, event, sha = JobResult.objects.values_list("backend_id", "event_type", "job_sha").get(pk=report.job_id)
    if event not in BASELINE_EVENTS:
        return 0
    with transaction.atomic():
        _lock([backend_id])
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    MERGE,
                    {
                        "backend": backend_id,
                        "at": micros(report.received_at),
                        "report": report.pk,
                        "job": report.job_id,
                        "sha": sha,
                    },
                )
                return cursor.rowcount
        cases = TestCase.objects.filter(report=report, status__in=COUNTED).order_by("-id")
        new: dict[str, list[list]] = defaultdict(list)
        for case_id, test_id, status, reruns in cases.values_list("id", "test_id", "status", "reruns"):
            new[test_id].append(entry(report.received_at, report.pk, case_id, status, reruns, report.job_id, sha))
        written = 0
        for chunk in _chunks(sorted(new)):
            held = TestRecent.objects.filter(backend_id=backend_id, test_id__in=chunk)
            old = dict(held.values_list("test_id", "results"))
            rows = [TestRecent(backend_id=backend_id, test_id=t, results=merged(new[t], old.get(t, []))) for t in chunk]
            _upsert(rows)
            written += len(rows)
        return written


def merged(new: list[list], old: list[list]) -> list[list]:
    """Both lists' results, newest first, the first HISTORY."""
    return sorted(new + old, key=lambda e: e[:3], reverse=True)[:HISTORY]


def recent_keys(report_ids: list[int]) -> dict[int, set[str]]:
    """The rows the cases of these reports count in: backend id → test ids (read before they stop counting)."""
    keys: dict[int, set[str]] = defaultdict(set)
    cases = TestCase.objects.filter(report_id__in=report_ids, job__event_type__in=BASELINE_EVENTS)
    rows = cases.values_list("job__backend_id", "test_id").distinct().order_by()
    for backend_id, test_id in rows.iterator(chunk_size=BATCH):
        keys[backend_id].add(test_id)
    return dict(keys)


def recent_recount(keys: dict[int, set[str]]) -> None:
    """Read these rows (backend id → test ids) again from the cases of the parsed reports (in the transaction that
    changed which cases count, after the change)."""
    with transaction.atomic():
        _lock(keys)
        for backend_id, tests in sorted(keys.items()):
            backend_recount(TestCase, TestRecent, backend_id=backend_id, tests=sorted(tests))


def backend_recount(case_model, recent_model, *, backend_id: int, tests: list[str] | None = None) -> None:
    """Replace the backend's rows (those of ``tests`` only, when given) by the newest HISTORY counted cases of the
    parsed reports of its nightly and push runs, BATCH tests at a time. Takes the models so that the migration
    filling the table runs it with its own."""
    cases = case_model.objects.filter(
        job__backend_id=backend_id,
        job__event_type__in=BASELINE_EVENTS,
        report__state=TestReport.State.PARSED,
        status__in=COUNTED,
    )
    if tests is None:
        recent_model.objects.filter(backend_id=backend_id).delete()
        tests = sorted(set(cases.values_list("test_id", flat=True).order_by().iterator(chunk_size=BATCH)))
    for chunk in _chunks(tests):
        recent_model.objects.filter(backend_id=backend_id, test_id__in=chunk).delete()
        newest = [F("report__received_at").desc(), F("report_id").desc(), F("id").desc()]
        ranked = (
            cases.filter(test_id__in=chunk)
            .annotate(n=Window(RowNumber(), partition_by=[F("test_id")], order_by=newest))
            .filter(n__lte=HISTORY)
            .order_by("test_id", *newest)
            .values_list(
                "test_id", "report__received_at", "report_id", "id", "status", "reruns", "job_id", "job__job_sha"
            )
        )
        found: dict[str, list[list]] = defaultdict(list)
        for test_id, at, report_id, case_id, status, reruns, job_id, sha in ranked:
            found[test_id].append(entry(at, report_id, case_id, status, reruns, job_id, sha))
        recent_model.objects.bulk_create(
            [recent_model(backend_id=backend_id, test_id=t, results=results) for t, results in found.items()],
            batch_size=BATCH,
        )


# PostgreSQL: the rows of (backend, test) pairs given as two arrays, one index probe each. As text, decoded here: the
# PR page reads about a thousand rows of 20 results, and a query of a thousand OR-ed parameters cost more to compile.
ROWS = """
SELECT r.backend_id, r.test_id, r.results::text
FROM ootci_testrecent r JOIN unnest(%s::bigint[], %s::text[]) AS wanted (backend_id, test_id)
     ON r.backend_id = wanted.backend_id AND r.test_id = wanted.test_id
"""


def recent_rows(tests: dict[int, list[str]], *, limit: int) -> dict[tuple[int, str], list[dict]]:
    """The last ``limit`` results of each test of ``tests`` (backend id → test ids) on its backend, newest first, by
    (backend id, test id), as ``hud.stores.base.CaseRows.history`` gives them; a test without any: absent."""
    pairs = sorted({(backend_id, test_id) for backend_id, ids in tests.items() for test_id in ids})
    if not pairs:
        return {}
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(ROWS, [[b for b, _ in pairs], [t for _, t in pairs]])
            rows = cursor.fetchall()
        # Each row decoded and made results in turn, its lists freed before the next (dicts of numbers, strings and
        # times are no work for the garbage collector; 20,000 lists held at once made it run a full pass).
        found = {(b, t): [as_result(e) for e in json.loads(results)[:limit]] for b, t, results in rows}
    else:
        wanted = Q()
        for backend_id, ids in tests.items():
            wanted |= Q(backend_id=backend_id, test_id__in=sorted(set(ids)))
        rows = TestRecent.objects.filter(wanted).values_list("backend_id", "test_id", "results")
        found = {(b, t): [as_result(e) for e in results[:limit]] for b, t, results in rows}
    return {key: results for key, results in found.items() if results}


def _upsert(rows: list[TestRecent]) -> None:
    TestRecent.objects.bulk_create(
        rows, batch_size=BATCH, update_conflicts=True, unique_fields=["backend", "test_id"], update_fields=["results"]
    )


def _lock(backend_ids: Iterable[int]) -> None:
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for backend_id in sorted(backend_ids):  # one order: two writers never wait on each other in a cycle
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [LOCK_CLASS, backend_id])


def _chunks(items: list[str]) -> Iterable[list[str]]:
    for start in range(0, len(items), BATCH):
        yield items[start : start + BATCH]
