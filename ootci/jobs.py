"""The state machine of a downstream job attempt (DESIGN §3): the one place a JobResult is created or moves.

DISPATCHED (a Dispatch row) → IN_PROGRESS → COMPLETED. Callbacks, the CRCR ingest and the sweeper all report through
:func:`job_report_apply`; they differ only in what a :class:`Report` states:

- a **callback** reports on the relay's clock and is strict: an exact repeat changes nothing, a report that
  contradicts what is recorded (another conclusion, going back to in_progress) is refused with 409;
- the **CRCR ingest** forwards the reference relay's reports with their own times and merges: values it states
  overwrite, values it leaves out never erase, and a completed job is not moved back to in_progress;
- the **sweeper** concludes a job still in progress as ``timed_out``, decided by the relay; a genuine completion
  arriving later replaces that verdict, and a job completed meanwhile is left alone.

Writes are optimistic and portable (PostgreSQL and SQLite alike, no lock, no transaction of our own): the row is
read, the transition decided in Python, and written by an UPDATE conditioned on the ``updated_at`` that was read,
which every write of a JobResult changes. If another writer got there first, the row is read again and the
transition decided again, so concurrent identical reports apply once.
"""

import json
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ootci.environment import environment_filled, environment_merged
from ootci.models import Dispatch, JobResult, TestReport
from ootci.replication import job_results_changed
from ootci.rows import columns, prepared_cursor, rows_as

Status, Source = JobResult.Status, JobResult.Source
# How often a write that lost a race is decided again before giving up (each retry means another writer succeeded).
MAX_TRIES = 5
FAILED_TESTS_CAP = 1000  # failed-test entries kept per job
FAILED_TEST_TEXT_CAP = 1000  # characters kept per entry
RECORDED = f"SELECT {columns(JobResult)} FROM ootci_jobresult WHERE " + " AND ".join(
    f"{name} = %s" for name in JobResult.ATTEMPT_FIELDS
)
RUN_FIELDS = ("backend_id", "delivery_id", "run_id", "run_attempt")
RUN_OPENED = (
    f"SELECT id, started_at FROM {JobResult._meta.db_table} WHERE "
    + " AND ".join(f"{name} = %s" for name in RUN_FIELDS)
    + " AND started_at IS NOT NULL ORDER BY started_at LIMIT 1"
)
INSERTED = [f for f in JobResult._meta.concrete_fields if not f.generated and not f.primary_key]
RETURNED = [JobResult._meta.pk, *(f for f in JobResult._meta.concrete_fields if f.generated)]
INSERT = (
    f"INSERT INTO {JobResult._meta.db_table} ({', '.join(f.column for f in INSERTED)})"
    f" VALUES ({', '.join(['%s'] * len(INSERTED))}) RETURNING {', '.join(f.column for f in RETURNED)}"
)
# The fields a parsed test report sets on its job (relay.reports.pull), over what the completed callback stated.
REPORT_COUNTS = frozenset({"passed", "failed", "skipped", "failed_tests"})


class JobConflict(Exception):
    """A report that contradicts the recorded attempt (callbacks answer it with 409)."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


@dataclass(frozen=True)
class Report:
    """What one report says of a job attempt.

    ``fields`` are the JobResult values it states (what it leaves out is not part of it, nor compared);
    ``started_at``/``completed_at``/``queue_time``/``execution_time`` among them override what the machine would
    derive. ``at`` is when the reported transition happened (the relay's clock for callbacks and the sweeper; None
    for an ingest report that gives its own times).
    """

    status: str
    source: str
    level: str
    at: datetime | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    merge: bool = False  # CRCR ingest: stated values overwrite instead of being refused when they differ
    relay_decided: bool = False  # the sweeper's verdict: applies only to a job still in progress
    # Where it ran (ootci.environment), merged over what is recorded: never compared, so never a conflict.
    environment: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Recorded:
    """A job attempt as its caller read it just before reporting on it, with its own reads in one statement
    (``relay.endpoints.job_reports.callback_known``): ``job`` None when there is none yet; ``run_opened`` the start of
    its run's first job (None: none started), what an in_progress's waits are measured from."""

    job: JobResult | None
    run_opened: datetime | None = None


@dataclass(frozen=True)
class Applied:
    job: JobResult
    changed: bool  # False for a report that changed nothing (an exact repeat): work that follows keys off this


def job_report_apply(
    *, key: dict[str, Any], report: Report, new: dict[str, Any] | None = None, recorded: Recorded | None = None
) -> Applied:
    """Apply ``report`` to the job attempt named by ``key`` (JobResult.attempt_key), creating it with the fields of
    ``new`` (upstream facts: event, PR, SHA, dispatch) when it does not exist yet. ``recorded``: the attempt as the
    caller read it, decided against first instead of read again."""
    # An in_progress report is usually a job attempt's first: try the insert before reading (one round trip).
    first = report.status == Status.IN_PROGRESS and not report.merge
    for _ in range(MAX_TRIES):
        if recorded is not None:  # a retry reads the row again
            job, read, recorded = recorded.job, recorded, None
        else:
            job, read = None if first else _recorded(key), None
        first = False
        if job is None:
            job = _created(key, report, new or {}, opened=read)
            if job is not None:
                job_results_changed()
                return Applied(job, True)
            continue  # created by a concurrent report in the meantime: decide against it
        changes = transition(job, report)
        if not changes:
            return Applied(job, False)
        if _written(job, changes):
            job_results_changed()
            return Applied(job, True)
    raise JobConflict(f"{job_label(key)} is being reported concurrently; send the report again.")


def _recorded(key: dict[str, Any]) -> JobResult | None:
    # The unique key's columns written out: on every callback the ORM took longer to compile this lookup than the
    # database to run it (tests/bench/bench_callback.py); mapped as raw() maps it (ootci.rows).
    found = rows_as(JobResult, RECORDED, [key[name] for name in JobResult.ATTEMPT_FIELDS])
    return found[0] if found else None


def transition(job: JobResult, report: Report) -> dict[str, Any]:
    """The fields ``report`` changes on the recorded ``job`` ({} when it changes nothing); JobConflict when a strict
    report contradicts it. Its environment is merged over the recorded one whatever else it changes."""
    changes = _transition(job, report)
    environment = environment_merged(job.environment or {}, report.environment)
    if environment != (job.environment or {}):
        changes = {**changes, "environment": environment}
    return changes


def environment_fill(*, job_id: int, found: dict[str, Any]) -> bool:
    """Fill in the keys of the job's environment it lacks from ``found`` (a parsed report's properties, the job API's
    runner), racing no other writer (the conditional UPDATE of the state machine). True when it changed."""
    for _ in range(MAX_TRIES):
        job = JobResult.objects.filter(pk=job_id).first()
        if job is None:
            return False
        filled = environment_filled(job.environment or {}, found)
        if filled == (job.environment or {}):
            return False
        if _written(job, {"environment": filled}):
            job_results_changed()
            return True
    return False


def _transition(job: JobResult, report: Report) -> dict[str, Any]:
    stated = report.fields
    changed = {name: value for name, value in stated.items() if getattr(job, name) != value}
    same = not changed
    completed = job.status == Status.COMPLETED
    if report.relay_decided:
        return _completion(job, report) if not completed else {}
    if report.status == Status.IN_PROGRESS:
        if same and not completed:
            return {}
        if report.merge:
            # A late or replayed in_progress never reopens a completed job; what else it states is kept.
            return {k: v for k, v in changed.items() if not (completed and k in ("conclusion", "completed_at"))}
        if completed:
            raise JobConflict(f"{job_label(job.attempt_key)} already completed ({job.conclusion}): it cannot go back.")
        raise JobConflict(
            f"{job_label(job.attempt_key)} is already in progress with other details ({_diff(job, stated)})."
        )
    # A genuine completion replaces the relay's timed_out verdict: the job was slow, not lost.
    if completed and not job.relay_decided:
        if same or _counted_by_report(job, changed):
            return {}
        if report.merge:
            return changed
        raise JobConflict(f"{job_label(job.attempt_key)} already completed differently ({_diff(job, stated)}).")
    return _completion(job, report)


def _counted_by_report(job: JobResult, changed: dict[str, Any]) -> bool:
    """A repeated completion whose test counts differ only because a parsed test report replaced them: a repeat."""
    return set(changed) <= REPORT_COUNTS and _has_parsed_report(job)


def _has_parsed_report(job: JobResult) -> bool:
    return job.test_reports.filter(state=TestReport.State.PARSED).exists()


def _completion(job: JobResult, report: Report) -> dict[str, Any]:
    fields = report.fields
    # Report counts win over callback counts: a report uploaded before the completion (the usual order for CI that is
    # not GitHub Actions) was parsed into the job already. Asked only when the job has counts, so a callback without
    # an earlier report pays no query.
    if job.passed is not None and REPORT_COUNTS & fields.keys() and _has_parsed_report(job):
        fields = {name: value for name, value in fields.items() if name not in REPORT_COUNTS}
    changes = {
        **fields,
        "status": Status.COMPLETED,
        "level": report.level,
        "relay_decided": report.relay_decided,
        "source": report.source,
    }
    if report.at is not None:
        changes.setdefault("completed_at", report.at)
    completed_at = changes.get("completed_at", job.completed_at)
    if "execution_time" not in changes and job.started_at and completed_at:
        changes["execution_time"] = seconds_between(job.started_at, completed_at)
    return changes


def _created(
    key: dict[str, Any], report: Report, new: dict[str, Any], *, opened: Recorded | None = None
) -> JobResult | None:
    fields = {**new, **report.fields, "status": report.status, "level": report.level, "source": report.source}
    fields["relay_decided"] = report.relay_decided
    if report.environment:
        fields["environment"] = report.environment
    if report.status == Status.IN_PROGRESS:
        if report.at is not None:
            fields.setdefault("started_at", report.at)
        if "started_at" in fields and "queue_time" not in fields:
            fields.update(_run_waits(key, fields["started_at"], fields.get("dispatch"), opened=opened))
    elif report.at is not None:
        fields.setdefault("completed_at", report.at)
    savepoint = transaction.atomic() if transaction.get_connection().in_atomic_block else nullcontext()
    job = JobResult(**key, **fields)
    try:
        with savepoint:
            _inserted(job)
    except IntegrityError:
        return None
    return job


def _inserted(job: JobResult) -> None:
    """``job.save()`` of a new attempt, its statement written out for the reason of RECORDED (compiling the ORM's
    INSERT of forty columns was a sixth of an in_progress callback's CPU): each value prepared as the field
    prepares it, the id and the generated columns returned as create() returns them."""
    db = transaction.get_connection()
    params = [field.get_db_prep_save(field.pre_save(job, True), db) for field in INSERTED]
    with prepared_cursor(db.alias) as cursor:
        cursor.execute(INSERT, params)
        row = cursor.fetchone()
    for returned, value in zip(RETURNED, row, strict=True):
        col = returned.get_col(JobResult._meta.db_table)
        for convert in db.ops.get_db_converters(col) + col.get_db_converters(db):
            value = convert(value, col, db)
        setattr(job, returned.attname, value)
    job._state.adding, job._state.db = False, db.alias


def _run_waits(
    key: dict[str, Any], started_at: datetime, dispatch: Dispatch | None, *, opened: Recorded | None = None
) -> dict[str, float]:
    """Queue time per workflow run: the job that opens its run (the run's first in_progress) carries the run's queue
    time, from the dispatch; a later job of the run carries its wait for the jobs it depends on instead, from the
    run's first in_progress to its own. Without the run's job graph the relay cannot tell a dependency from a runner
    that was busy, so a later job's whole wait counts as waiting for dependencies. ``opened``: that start as the
    caller read it."""
    if opened is not None:
        run_opened = opened.run_opened
    else:
        found = rows_as(JobResult, RUN_OPENED, [key[name] for name in RUN_FIELDS])  # written out as RECORDED is
        run_opened = found[0].started_at if found else None
    if run_opened is not None:
        return {"dependency_wait": seconds_between(run_opened, started_at)}
    # Re-runs reuse the original dispatch, days old: a queue time only means something for attempt 1.
    if key["run_attempt"] == 1 and dispatch is not None and dispatch.sent_at:
        return {"queue_time": seconds_between(dispatch.sent_at, started_at)}
    return {}


def _written(job: JobResult, changes: dict[str, Any]) -> bool:
    """Write ``changes`` if nobody wrote the row since it was read; on success ``job`` holds them too."""
    now = timezone.now()
    # updated_at by hand (no auto_now here): replication and the fence below follow it.
    values = {**changes, "updated_at": now}
    fields = [JobResult._meta.get_field(name) for name in values]
    db = transaction.get_connection()
    stamp = JobResult._meta.get_field("updated_at")
    # Written out for the reason of RECORDED; the values go through each field's own preparation.
    sql = (
        f"UPDATE {JobResult._meta.db_table} SET {', '.join(f'{field.column} = %s' for field in fields)}"
        " WHERE id = %s AND updated_at = %s"
    )
    params = [field.get_db_prep_save(values[field.name], db) for field in fields]
    params += [job.pk, stamp.get_db_prep_value(job.updated_at, db)]
    with prepared_cursor(db.alias) as cursor:
        cursor.execute(sql, params)
        if cursor.rowcount != 1:
            return False
    for name, value in values.items():
        setattr(job, name, value)
    for name in JobResult.GENERATED:
        job.__dict__.pop(name, None)  # deferred: reloaded from the database when read
    return True


def seconds_between(start: datetime, end: datetime) -> float:
    # Clocks are ours on both ends, but a dispatch row's sent_at can be written after a fast callback.
    return round(max(0.0, (end - start).total_seconds()), 3)


def job_label(key: dict[str, Any]) -> str:
    return f"Job {key['workflow_name']}/{key['job_name']} run {key['run_id']} attempt {key['run_attempt']}"


def _diff(job: JobResult, stated: dict[str, Any]) -> str:
    return (
        ", ".join(
            f"{name} {getattr(job, name)!r} ≠ {value!r}"
            for name, value in stated.items()
            if getattr(job, name) != value and name != "failed_tests"
        )
        or "failed_tests differ"
    )


def failed_tests_capped(entries: list[Any]) -> list[str]:
    """The failed-test list as stored: text entries, at most FAILED_TESTS_CAP, each at most FAILED_TEST_TEXT_CAP."""
    kept = []
    for entry in entries:
        text = _failed_test_text(entry).replace("\x00", "").strip()
        if not text:
            continue
        kept.append(text if len(text) <= FAILED_TEST_TEXT_CAP else text[: FAILED_TEST_TEXT_CAP - 1] + "…")
        if len(kept) == FAILED_TESTS_CAP:
            break
    return kept


def _failed_test_text(entry: Any) -> str:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict):
        name = str(entry.get("name") or entry.get("nodeid") or entry.get("test") or "")
        message = str(entry.get("message") or "")
        if name:
            return f"{name}: {message}" if message else name
    return json.dumps(entry, ensure_ascii=False)
