"""django-q2 tasks: each takes ids, calls one service, and is safe to run twice."""

import logging

from ootci import ledger
from relay.alerts import incidents, notify
from relay.breaks import alerts as break_alerts_
from relay.breaks import bisect, detect, suspects
from relay.endpoints import intake, sha_check
from relay.github import check_runs, outbox, reruns
from relay.reliability import journal, sweeper
from relay.reports import follow_up, logs, pull, verdicts

logger = logging.getLogger(__name__)

# --- webhook intake and the dispatch outbox ----------------------------------------------------


def delivery_dispatches_send(delivery_pk: int) -> dict[str, int]:
    return outbox.delivery_dispatches_send(delivery_pk=delivery_pk)


def dispatch_send(dispatch_id: int) -> str:
    return outbox.dispatch_send(dispatch_id=dispatch_id)


def dispatches_send(dispatch_ids: list[int]) -> dict[str, int]:
    """The continuation of a fan-out that stopped at its task's deadline."""
    return outbox.dispatches_send(dispatch_ids=dispatch_ids)


def dispatches_resend_stale() -> dict[str, int]:
    """Scheduled every minute (relay/migrations/0001_dispatch_resend_schedule.py)."""
    return outbox.dispatches_resend_stale()


def deliveries_finish_pending() -> int:
    """Scheduled every minute (relay/migrations/0003_pending_deliveries_schedule.py)."""
    return intake.deliveries_finish_pending()


def journal_replay() -> dict[str, int]:
    """Scheduled every minute (relay/migrations/0004_journal_replay_schedule.py)."""
    return journal.journal_replay()


def delivery_archive(delivery_pk: int, body: bytes) -> str:
    # The delivery and its dispatches are already committed; an archive failure is logged, never raised.
    try:
        return outbox.delivery_archive(delivery_pk=delivery_pk, body=body)
    except Exception:
        logger.exception("archiving delivery %s failed", delivery_pk)
        return ""


# --- callbacks and the sweeper -----------------------------------------------------------------


def sha_checks_retry() -> dict[str, int]:
    """Scheduled every 10 minutes (relay/migrations/0009_sha_recheck_schedule.py)."""
    return sha_check.sha_checks_retry()


def jobs_sweep() -> dict[str, int]:
    """Scheduled every 10 minutes (relay/migrations/0002_callbacks_sweeper_schedule.py)."""
    result = sweeper.jobs_sweep()
    waiting = follow_up.follow_ups_resume()
    return {"timed_out": len(result.timed_out), "lost": result.lost, "follow_ups_waiting": waiting}


def job_completed(job_id: int) -> str:
    """Enqueued on commit by a callback that completed a job unsuccessfully (a success's is in the bulk task below,
    unless Redis is not there to hold the list): its reports, its log, the alert rules."""
    return follow_up.job_completed_follow_up(job_id=job_id)


def job_follow_ups() -> dict[str, int]:
    """Enqueued once for a burst of successful completions: each one's ``job_completed`` (follow_up_queue)."""
    return follow_up.follow_ups_take()


# --- check runs and re-runs --------------------------------------------------------------------


def check_run_sync(job_id: int, attempt: int = 1) -> str:
    """Enqueued on commit by a callback, the label backfill and the sweeper; retries schedule it again."""
    return check_runs.check_run_sync(job_id=job_id, attempt=attempt)


def job_alerts(job_id: int) -> str:
    """Enqueued on commit when a PR job's verdict may have changed (its report parsed, its log classified)."""
    return incidents.job_alerts_evaluate(job_id=job_id)


def pr_alerts(job_id: int) -> str:
    """Enqueued once for a burst of a PR's failed jobs on one SHA (incidents.once_for_burst): the PR rule."""
    return incidents.pr_alerts_evaluate(job_id=job_id)


def runners_alerts(backend_id: int) -> dict[str, int]:
    """Enqueued once for a burst of a backend's jobs that say where they ran: the sick-runner rule."""
    return incidents.runners_alerts_evaluate(backend_id=backend_id)


def ledger_record(job_id: int) -> str:
    """Enqueued on commit when a baseline run's report is parsed: its skip ledger and diff, then the skip alert."""
    run = ledger.ledger_record(job_id=job_id)
    return incidents.skips_evaluate(run.pk) if run else "not a baseline run"


def job_infra_retry(job_id: int) -> str:
    """Enqueued on commit when an L3/L4 PR job's verdict is infra: its one automatic re-run."""
    return verdicts.job_infra_retry(job_id=job_id)


def pull_request_check_runs_backfill(delivery_pk: int) -> int:
    """The effect of a labeled delivery (relay.endpoints.intake.EFFECT_TASKS)."""
    return check_runs.pull_request_check_runs_backfill(delivery_pk=delivery_pk)


def rerun_request(delivery_pk: int, attempt: int = 1, only: list[list] | None = None) -> dict[str, int]:
    """The effect of a re-run request (relay.endpoints.intake.EFFECT_TASKS); retries schedule it again."""
    return reruns.rerun_request_handle(delivery_pk=delivery_pk, attempt=attempt, only=only)


# --- test reports ------------------------------------------------------------------------------


def job_reports_pull(job_id: int, attempt: int = 1, artifacts: list[dict] | None = None) -> dict[str, int]:
    """Enqueued on commit by a completed callback of a GitHub Actions job, with the artifacts its run's listing
    shows for it; retries schedule it again (and list the run again)."""
    return pull.job_reports_pull(job_id=job_id, attempt=attempt, artifacts=artifacts)


def run_reports_pull(job_id: int, attempt: int = 1) -> str:
    """Enqueued when a completed job's run could not be listed, and by the sweeper for a job it timed out: the
    job's reports and those of its run attempt's jobs that waited for it; retries schedule it again."""
    return follow_up.run_reports_pull(job_id=job_id, attempt=attempt)


def report_parse(report_id: int) -> str:
    """Enqueued on commit when a report's raw bytes are stored (pulled, uploaded or marked for re-parse)."""
    return pull.report_parse(report_id=report_id)


def reports_clean() -> int:
    """Scheduled daily (relay/migrations/0005_test_reports_clean_schedule.py, renamed in 0008)."""
    return pull.reports_clean()


# --- failed jobs' logs -------------------------------------------------------------------------------------------


def job_log_classify(job_id: int) -> str:
    """Enqueued on commit by a callback that completed a job as failed, by an uploaded log and by reclassify."""
    return logs.job_log_classify(job_id=job_id)


def job_logs_clean() -> int:
    """Scheduled daily (relay/migrations/0007_job_logs_clean_schedule.py)."""
    return logs.job_logs_clean()


# --- on-call alerts and notifications ----------------------------------------------------------


def alerts_periodic() -> dict:
    """Scheduled every minute (relay/migrations/0006_alerts_schedule.py): relay health and readiness gates."""
    return incidents.periodic_evaluate()


def notification_send(notification_id: int, attempt: int = 1) -> str:
    """Enqueued on commit when an incident changes; retries schedule it again."""
    return notify.notification_send(notification_id=notification_id, attempt=attempt)


# --- breaks: suspects and bisection --------------------------------------------------------------------------------


def breaks_after_report(job_id: int) -> str:
    """Enqueued on commit when a baseline run's report is parsed: the breaks it opens, joins or closes."""
    return detect.breaks_after_report(job_id=job_id)


def bisect_step_report(job_id: int) -> str:
    """Enqueued on commit when a bisection step's report is parsed: the step decided, the next one dispatched."""
    return bisect.step_after_report(job_id=job_id)


def bisect_step_ended(job_id: int) -> str:
    """Enqueued by a bisection step's completed callback: inconclusive when no report is to come."""
    return bisect.step_after_completion(job_id=job_id)


def break_suspects(break_id: int, attempt: int = 1) -> str:
    """Enqueued on commit when a break opens or gains tests; GitHub trouble schedules it again."""
    return suspects.break_suspects(break_id=break_id, attempt=attempt)


def bisections_advance() -> dict[str, int]:
    """Scheduled every 10 minutes (relay/migrations/0010_bisections_schedule.py): running bisections advanced."""
    return bisect.bisections_advance()


def bisect_advance(break_id: int) -> str:
    """A bisection's next step, after its request or a step's result."""
    return bisect.bisect_advance(break_id=break_id)


def break_alerts(break_id: int) -> dict[str, str]:
    """Enqueued on commit when a bisection moves: the break's incidents (and issues) brought up to date."""
    return break_alerts_.break_evaluate_by_id(break_id=break_id)
