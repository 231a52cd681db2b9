"""On-call alerting: the rules of ``ootci.models.AlertRule``, evaluated after a callback completes a job (by the
worker, ``relay.reports.follow_up.job_completed_follow_up``) and every minute (relay health and readiness gates,
:func:`periodic_evaluate`).

An incident opens once per fingerprint (a partial unique index: concurrent evaluations race on it and the loser
updates the winner's row). Baseline, relay-health and gate incidents resolve after ``resolve_after`` green results
in a row; a PR's resolves as soon as its failing jobs are green. After an incident resolves, the same one does not
open again for ``cooldown_minutes`` (no flapping). What changed is handed to ``relay.alerts.notify``; nothing is sent
for successes, for L1/L2 backends' PR jobs, or for PR failures whose verdict clears the PR (``ootci.verdicts``:
infra, disabled, flaky, broken-baseline).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from django_q.tasks import async_task

from ootci import baseline, governance, ledger, levels, runners, staleness, verdicts
from ootci.models import AlertRule, Backend, Delivery, Dispatch, Event, Incident, JobResult, LedgerRun, lost_cutoff
from ootci.rows import columns, rows_as
from relay.alerts import notify
from relay.alerts.fire import firing, incident_fire, incident_green, rule_for
from relay.github import client as github

logger = logging.getLogger(__name__)

BURST_PENDING = "relay:alerts-pending:"
BURST_PENDING_SECONDS = 120

BASELINE_EVENTS = (Event.PUSH, Event.NIGHTLY, Event.PERIODIC)
COUNTED = (JobResult.Outcome.SUCCESS, JobResult.Outcome.TEST, JobResult.Outcome.INFRA)
RUNS_OF_SHAS = (
    f"SELECT {columns(JobResult)} FROM {JobResult._meta.db_table} WHERE backend_id = %s"
    f" AND event_type IN ({', '.join(['%s'] * len(BASELINE_EVENTS))}) AND workflow_name = %s AND job_name = %s"
    " AND status = %s"
)
RUNS_WINDOW = (
    RUNS_OF_SHAS.replace(columns(JobResult), "id, job_sha, finished_at", 1)
    + " ORDER BY finished_at DESC, id DESC LIMIT %s"
)
RUNS_LATEST_FIRST = "ORDER BY " + ", ".join(
    f"{name.lstrip('-')} {'DESC' if name.startswith('-') else 'ASC'}" for name in JobResult.LATEST_ORDER
)


def job_alerts_evaluate(*, job_id: int, job: JobResult | None = None, fires: dict[str, bool] | None = None) -> str:
    """The rules a job's result bears on: the PR rule for a pull_request job, the baseline rule for the others.
    ``job``: the row with its backend, just read by the caller (the completed callback's follow-up), not read again;
    ``fires``: whether the incidents of ``job_fingerprint`` fire, when the caller looked them up for several jobs.
    The rules that read more than the job (its backend's runners, its PR's jobs) are evaluated once for a burst of
    jobs (``once_for_burst``): a 100-shard run that failed evaluated its PR's 100 jobs 100 times."""
    if job is None or job.pk != job_id:
        job = JobResult.objects.select_related("backend").filter(pk=job_id).first()
    if job is None or job.status != JobResult.Status.COMPLETED:
        return "nothing"
    if job.environment:
        once_for_burst(f"runners:{job.backend_id}", "relay.tasks.runners_alerts", job.backend_id)
    if job.event_type == Event.PULL_REQUEST:
        return pr_evaluate(job, fires)
    return baseline_evaluate(job, fires)


def job_fingerprint(job: JobResult) -> str | None:
    """The incident of the rule a completed job bears on, which its success resolves if it fires (None: no rule)."""
    if job.event_type == Event.PULL_REQUEST:
        return pr_fingerprint(job) if job.pr_number else None
    return baseline_fingerprint(job) if job.event_type in BASELINE_EVENTS else None


def pr_fingerprint(job: JobResult) -> str:
    return f"{AlertRule.Kind.PR_TEST}:{job.backend_id}:{job.upstream_repo}#{job.pr_number}"


def baseline_fingerprint(job: JobResult) -> str:
    return f"{AlertRule.Kind.BASELINE}:{job.backend_id}:{job.workflow_name}/{job.job_name}"


def _fires(fingerprint: str, fires: dict[str, bool] | None) -> bool:
    known = None if fires is None else fires.get(fingerprint)
    return firing(fingerprint) if known is None else known


def once_for_burst(key: str, task: str, *args) -> str:
    """Queue ``task(*args)``, the evaluation of ``key``, unless one is queued that has not started: it is marked
    pending until the task starts (``burst_started``), and the jobs that complete meanwhile leave it to that one. A
    follow-up runs after its job's commit and the task reads after it starts, so it sees every job that left it.
    The worker follows up a burst's jobs in a row, then the one evaluation. A cache that fails queues one each; a
    task lost before it started leaves its mark for BURST_PENDING_SECONDS (the next job after that queues one)."""
    try:
        if not cache.add(BURST_PENDING + key, 1, BURST_PENDING_SECONDS):
            return "coalesced"
    except Exception as e:  # Redis, or the embedded default's database cache: whatever the backend raises
        logger.warning("alerts: cache unavailable (%s): %s evaluated for this job alone", e, key)
    transaction.on_commit(lambda: async_task(task, *args, save=False), robust=True)
    return "queued"


def burst_started(key: str) -> None:
    """First thing in a ``once_for_burst`` task: a job completing from now on queues another evaluation."""
    try:
        cache.delete(BURST_PENDING + key)
    except Exception as e:
        logger.warning("alerts: cache unavailable (%s): %s stays pending for its time", e, key)


# --- the rules ------------------------------------------------------------------------------------------------------


def pr_evaluate(job: JobResult, fires: dict[str, bool] | None = None) -> str:
    """An L3/L4 backend's failures on the PR (its latest attempts on the job's SHA) whose verdict (``ootci.baseline``)
    is ``new`` or ``unknown``: an incident per PR and backend, updated on every change (a parsed report, a re-run),
    resolved as soon as none is left. Each job's failures are in the details, grouped by verdict with their evidence,
    for the PR comment. Evaluated once for a burst of the PR's jobs on that SHA."""
    backend = job.backend
    if levels.policy(backend.level).display_on_pr == levels.PrDisplay.NEVER or not job.pr_number:
        return "nothing"
    fingerprint = pr_fingerprint(job)
    if job.outcome == JobResult.Outcome.SUCCESS and not _fires(fingerprint, fires):
        return "quiet"  # a success opens nothing, and there is nothing to resolve
    return once_for_burst(f"{fingerprint}:{job.job_sha}", "relay.tasks.pr_alerts", job.pk)


def pr_alerts_evaluate(*, job_id: int) -> str:
    """The PR rule over the PR's jobs on ``job_id``'s SHA: the task ``pr_evaluate`` queued for a burst."""
    job = JobResult.objects.select_related("backend").filter(pk=job_id).first()
    if job is None:
        return "nothing"
    fingerprint = pr_fingerprint(job)
    burst_started(f"{fingerprint}:{job.job_sha}")
    return pr_jobs_evaluate(job, fingerprint)


def pr_jobs_evaluate(job: JobResult, fingerprint: str) -> str:
    backend = job.backend
    rule = rule_for(AlertRule.Kind.PR_TEST, backend)
    if rule is None:
        return "nothing"
    same = JobResult.objects.filter(
        backend=backend, event_type=Event.PULL_REQUEST, pr_number=job.pr_number, job_sha=job.job_sha
    )
    latest = baseline.latest_attempts(same.select_related("backend"))
    found = baseline.jobs_verdicts(latest)
    blocking = (verdicts.NEW, verdicts.UNKNOWN)
    failing = [j for j in latest if j.outcome == JobResult.Outcome.TEST and found[j.pk].verdict in blocking]
    details = {
        "upstream_repo": job.upstream_repo,
        "sha": job.job_sha,
        "jobs": [job_entry(j, found.get(j.pk)) for j in sorted(latest, key=lambda j: (j.workflow_name, j.job_name))],
    }
    if failing:
        names = ", ".join(f"{j.workflow_name} / {j.job_name}" for j in failing)
        what = f"{backend.repo}: {len(failing)} job(s) with new failures on PR #{job.pr_number}: {names}"
        return incident_fire(
            rule, backend=backend, fingerprint=fingerprint, what=what, details=details, pr_number=job.pr_number
        )
    if any(j.outcome == JobResult.Outcome.RUNNING for j in latest):
        return "waiting"  # a re-run is under way: green when it is
    return incident_green(fingerprint, resolve_after=1, details=details)


def job_entry(j: JobResult, found: baseline.JobVerdict | None = None) -> dict:
    entry = {
        "job": f"{j.workflow_name} / {j.job_name}",
        "sha": j.job_sha,
        "outcome": j.outcome,
        "attempt": j.run_attempt,
        "url": j.run_url,
        "failed_tests": list(j.failed_tests or [])[:10],
        "verdict": found.verdict if found else "",
    }
    if found:
        entry["tests"] = [
            {"test_id": t.test_id, "verdict": t.verdict, "evidence": list(t.evidence)} for t in found.tests[:20]
        ]
        entry["baseline_sha"] = found.baseline_sha
    return entry


def baseline_evaluate(job: JobResult, fires: dict[str, bool] | None = None) -> str:
    """``threshold`` failures in a row of one job on the backend's baseline runs open an incident; ``resolve_after``
    successes in a row resolve it."""
    backend = job.backend
    if job.event_type not in BASELINE_EVENTS:
        return "nothing"
    fingerprint = baseline_fingerprint(job)
    # A success opens nothing: with nothing firing there is nothing to count (one statement instead of four for most
    # completed jobs). A later attempt that failed was evaluated after it finished, with this one in its window.
    if job.outcome == JobResult.Outcome.SUCCESS and not _fires(fingerprint, fires):
        return "quiet"
    rule = rule_for(AlertRule.Kind.BASELINE, backend)
    if rule is None:
        return "nothing"
    need = max(int(rule.threshold), rule.resolve_after)
    recent = recent_latest_attempts(job, need)
    outcomes = [j.outcome for j in recent if j.outcome in COUNTED][:need]
    n = int(rule.threshold)
    if outcomes and outcomes[0] != JobResult.Outcome.SUCCESS:
        # A failure while the incident fires starts the green count again (hysteresis); opening needs n in a row.
        if not firing(fingerprint) and (len(outcomes) < n or JobResult.Outcome.SUCCESS in outcomes[:n]):
            return "nothing"
        what = f"{backend.repo}: {job.workflow_name} / {job.job_name} failed {n} baseline runs in a row"
        details = {"jobs": [job_entry(j) for j in recent[:n]]}
        return incident_fire(rule, backend=backend, fingerprint=fingerprint, what=what, details=details)
    return incident_green(fingerprint, resolve_after=rule.resolve_after)


def recent_latest_attempts(job: JobResult, need: int) -> list[JobResult]:
    """The latest attempts of ``job``'s baseline runs (its backend's completed runs of its workflow and job name),
    newest finish first, as far back as their first ``need`` counted outcomes: read from a window of the newest rows,
    widened until no older row could change the answer, never the job's whole history. A SHA outside the window
    finished none of its attempts after the window's oldest row, so an answer whose ``need``-th counted outcome
    finished after that row is the whole history's. Both statements written out (RUNS_WINDOW): compiling them through
    the ORM cost each completed job's follow-up more CPU than running them."""
    need = max(need, 1)
    size = 4 * need + 8
    runs = [job.backend_id, *BASELINE_EVENTS, job.workflow_name, job.job_name, JobResult.Status.COMPLETED.value]
    while True:
        window = rows_as(JobResult, RUNS_WINDOW, [*runs, size])
        if not window:
            return []
        shas = sorted({j.job_sha for j in window})
        marks = ", ".join(["%s"] * len(shas))
        attempts = rows_as(JobResult, f"{RUNS_OF_SHAS} AND job_sha IN ({marks}) {RUNS_LATEST_FIRST}", [*runs, *shas])
        recent = sorted(baseline.latest_of(attempts), key=lambda j: (j.finished_at, j.pk), reverse=True)
        counted = [j for j in recent if j.outcome in COUNTED]
        if len(window) < size or (len(counted) >= need and counted[need - 1].finished_at > window[-1].finished_at):
            return recent
        size *= 4


def relay_evaluate(*, now: datetime) -> str:
    """Dispatches that failed, or were lost, in the last ``window_minutes`` above ``threshold`` percent."""
    rule = rule_for(AlertRule.Kind.RELAY, None)
    if rule is None:
        return "nothing"
    since = now - timedelta(minutes=rule.window_minutes)
    made = Dispatch.objects.filter(created_at__gte=since, created_at__lt=now)
    failed = made.filter(status=Dispatch.Status.FAILED).count()
    # A dispatch becomes lost ZOMBIE_TIMEOUT_HOURS after it was made: those that did in this window.
    cutoff = lost_cutoff(now)
    lost = Dispatch.objects.lost(now=now).filter(created_at__gte=cutoff - (now - since)).count()
    total = made.count() + lost
    rate = 100.0 * (failed + lost) / total if total else 0.0
    if total and rate > rule.threshold:
        what = f"relay: {failed} dispatch(es) failed and {lost} lost of {total} in {rule.window_minutes} minutes"
        details = {"failed": failed, "lost": lost, "total": total}
        return incident_fire(rule, backend=None, fingerprint=rule.kind, what=what, details=details, now=now)
    return incident_green(rule.kind, resolve_after=rule.resolve_after, now=now)


def gates_evaluate(*, now: datetime | None = None) -> dict[str, int]:
    """L3/L4 backends whose own level's gates newly fail over the demotion window (the HUD's cached figures unless
    ``now`` is given)."""
    backends = list(Backend.objects.filter(enabled=True, level__in=levels.with_check_runs()))
    judged = governance.readiness_now(backends, now=now)
    done: dict[str, int] = {}
    for backend in backends:
        rule = rule_for(AlertRule.Kind.GATE, backend)
        if rule is None:
            continue
        r, fingerprint = judged[backend.pk], f"{AlertRule.Kind.GATE}:{backend.pk}"
        if r.failing:
            what = f"{backend.repo}: {r.text} ({', '.join(r.failing)})"
            found = incident_fire(
                rule, backend=backend, fingerprint=fingerprint, what=what, details={"failing": r.failing}, now=now
            )
        else:
            found = incident_green(fingerprint, resolve_after=rule.resolve_after, now=now)
        done[found] = done.get(found, 0) + 1
    return done


def stale_evaluate(*, now: datetime) -> dict[str, int]:
    """Backends gone silent (``ootci.staleness``): an incident each, resolved by their next report."""
    backends = list(Backend.objects.filter(enabled=True).exclude(level=levels.Level.L1))
    silent = staleness.silences(backends, now=now)
    done: dict[str, int] = {}
    for backend in backends:
        rule = rule_for(AlertRule.Kind.STALE, backend)
        if rule is None:
            continue
        fingerprint = f"{AlertRule.Kind.STALE}:{backend.pk}"
        if found := silent.get(backend.pk):
            what = f"{backend.repo}: {found.text(now)}"
            details = {"event": found.event, "since": found.since.isoformat(), "unanswered": found.unanswered}
            outcome = incident_fire(rule, backend=backend, fingerprint=fingerprint, what=what, details=details, now=now)
        else:
            outcome = incident_green(fingerprint, resolve_after=1, now=now)
        done[outcome] = done.get(outcome, 0) + 1
    return done


def relay_silence_evaluate(*, now: datetime) -> str:
    """The relay itself gone silent: no webhook for WEBHOOK_SILENCE_MINUTES while GitHub answers the App (a revoked
    App or a rotated webhook secret looks exactly like this); resolved by the next webhook."""
    rule = rule_for(AlertRule.Kind.STALE, None)
    if rule is None or not settings.WEBHOOK_SILENCE_MINUTES:
        return "nothing"
    fingerprint = f"{AlertRule.Kind.STALE}:relay"
    last = Delivery.objects.filter(event__in=(Event.PULL_REQUEST, Event.PUSH)).aggregate(at=Max("received_at"))["at"]
    if last is None or now - last <= timedelta(minutes=settings.WEBHOOK_SILENCE_MINUTES):
        return incident_green(fingerprint, resolve_after=1, now=now)
    if not github.github_reachable(repo=settings.UPSTREAM_REPO):
        return "github unreachable"  # not the relay's silence: the network's, or GitHub's
    minutes = int((now - last).total_seconds() // 60)
    what = f"relay: no webhook from {settings.UPSTREAM_REPO} for {minutes} minutes while GitHub answers"
    return incident_fire(
        rule, backend=None, fingerprint=fingerprint, what=what, details={"last": last.isoformat()}, now=now
    )


def runners_alerts_evaluate(*, backend_id: int) -> dict[str, int]:
    """``runners_evaluate``: the task a burst of jobs that say where they ran queued (``job_alerts_evaluate``)."""
    burst_started(f"runners:{backend_id}")
    backend = Backend.objects.filter(pk=backend_id).first()
    return {} if backend is None else runners_evaluate(backend)


def runners_evaluate(backend: Backend, *, now: datetime | None = None) -> dict[str, int]:
    """The backend's sick runners (``ootci.runners``) over the last 24 h: an incident each, resolved once the runner
    is no longer significantly worse than its backend. Evaluated after the jobs that say where they ran, once for a
    burst of them."""
    rule = rule_for(AlertRule.Kind.SICK_RUNNER, backend)
    if rule is None:
        return {}
    sick = {s.key: s for s in runners.sick_runners([backend.pk], now=now).get(backend.pk, [])}
    prefix = f"{AlertRule.Kind.SICK_RUNNER}:{backend.pk}:"
    fired = Incident.objects.filter(state=Incident.State.FIRING, fingerprint__startswith=prefix)
    done: dict[str, int] = {}
    for key in sick.keys() | {f.removeprefix(prefix) for f in fired.values_list("fingerprint", flat=True)}:
        found = sick.get(key)
        if found is not None:
            what = f"{backend.repo}: {found.text}"
            outcome = incident_fire(
                rule, backend=backend, fingerprint=prefix + key, what=what, details=found.evidence(), now=now
            )
        else:
            outcome = incident_green(prefix + key, resolve_after=1, now=now)
        done[outcome] = done.get(outcome, 0) + 1
    return done


def runners_recheck(*, now: datetime) -> int:
    """The backends with a firing sick-runner incident evaluated again (every minute): a runner whose failures left
    the 24 h window resolves without waiting for its backend's next job."""
    fired = Incident.objects.filter(state=Incident.State.FIRING, rule__kind=AlertRule.Kind.SICK_RUNNER)
    backends = Backend.objects.filter(pk__in=fired.values("backend_id"))
    return sum(runners_evaluate(backend, now=now).get("resolved", 0) for backend in backends)


def skips_evaluate(run_id: int) -> str:
    """More than the threshold (SKIP_ALERT_TESTS, 50) of a backend's tests started skipping on the day of a
    baseline run just recorded in the skip ledger: an incident, resolved by a later day under the threshold."""
    run = LedgerRun.objects.select_related("backend").filter(pk=run_id).first() if run_id else None
    rule = rule_for(AlertRule.Kind.SKIPS, run.backend) if run else None
    if run is None or rule is None:
        return "nothing"
    fingerprint = f"{AlertRule.Kind.SKIPS}:{run.backend_id}"
    started, limit = ledger.skips_started(run.backend_id, run.day), ledger.skip_alert_threshold(rule.threshold)
    if started > limit:
        what = f"{run.backend.repo}: {started} tests started skipping on {run.day:%Y-%m-%d} (more than {limit})"
        details = {"day": run.day.isoformat(), "started_skipping": started, "threshold": limit}
        return incident_fire(rule, backend=run.backend, fingerprint=fingerprint, what=what, details=details)
    opened = Incident.objects.filter(fingerprint=fingerprint, state=Incident.State.FIRING).values_list(
        "details__day", flat=True
    )
    if any(day and day < run.day.isoformat() for day in opened):  # a later day under the threshold
        return incident_green(fingerprint, resolve_after=1)
    return "nothing"


def periodic_evaluate(*, now: datetime | None = None) -> dict:
    """The schedule (every minute): relay health, the readiness gates, silent backends, sick runners that recovered
    and lost notifications."""
    at = now or timezone.now()
    found = {"relay": relay_evaluate(now=at), "gates": gates_evaluate(now=now), "stale": stale_evaluate(now=at)}
    found |= {"webhooks": relay_silence_evaluate(now=at), "runners": runners_recheck(now=at)}
    return found | {"resent": len(notify.notifications_resume(now=at))}
