"""Notifications of incidents (``relay.alerts.incidents``) through the channels a backend opted into
(``ootci.models.NotificationChannel``), sent by the task worker with retries, never in a callback's request.

- ``pr_comment``: one comment per upstream PR, Dr.CI's way, a section per backend that opted in: created once and
  edited in place on every change of a backend's incident (a parsed report, a re-run attempt, a later success), each
  section's failures grouped by verdict, resolved when its failing jobs are green. A sender claims the PR's
  ``PrComment`` row and calls GitHub outside any transaction, and finds our comment by its marker before creating
  one: concurrent completions, and a retry after a crash, never post two comments.
- ``repo_issue``: an issue in the backend's repository for baseline breakage, opened with the incident and closed
  with it; a break's (``relay.breaks.alerts``) is edited in place as its suspects and bisection come in.
- ``webhook``: a JSON POST with a Slack-compatible ``text`` field and the incident, on opening and resolution.
- ``email``: to the channel's addresses through Django's email backend, on opening and resolution.

Each (incident, channel) has one ``Notification`` row: its status, attempts and last error.
"""

from __future__ import annotations

import logging
import smtplib
from datetime import datetime, timedelta

import requests
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django_q.models import Schedule
from django_q.tasks import async_task, schedule

from ootci import claims, verdicts
from ootci.models import AlertRule, Incident, Notification, NotificationChannel, PrComment
from relay.github import client as github

logger = logging.getLogger(__name__)

Kind = NotificationChannel.Kind
# Which incidents each channel carries, and on which changes ("updated" only where a message is edited in place).
CARRIES = {
    Kind.PR_COMMENT: ({AlertRule.Kind.PR_TEST}, {"opened", "updated", "resolved"}),
    Kind.REPO_ISSUE: ({AlertRule.Kind.BASELINE}, {"opened", "updated", "resolved"}),  # a break's: edited in place
    Kind.WEBHOOK: (set(AlertRule.Kind), {"opened", "resolved"}),
    Kind.EMAIL: (set(AlertRule.Kind), {"opened", "resolved"}),
}
COMMENT_ROUNDS = 20  # renders of one send while the PR's incidents keep changing under it
COMMENT_LINES = 100  # failures listed per verdict in a PR comment (GitHub's limit is 65,536 characters)
SEND_ERRORS = (github.GitHubError, requests.RequestException, smtplib.SMTPException, OSError)


def incident_notify(*, incident: Incident, change: str) -> list[int]:
    """Mark the notifications ``change`` calls for pending and queue their sending after the commit."""
    rule_kind = incident.rule.kind
    channels = NotificationChannel.objects.filter(backend=incident.backend, enabled=True)
    due = []
    for channel in channels:
        kinds, changes = CARRIES[channel.kind]
        if rule_kind not in kinds or change not in changes:
            continue
        n, _ = Notification.objects.get_or_create(incident=incident, channel=channel)
        n.status, n.attempts, n.last_error = Notification.Status.PENDING, 0, ""
        n.save(update_fields=["status", "attempts", "last_error", "updated_at"])
        due.append(n.pk)
    for pk in due:
        transaction.on_commit(lambda pk=pk: async_task("relay.tasks.notification_send", pk), robust=True)
    return due


def notification_send(*, notification_id: int, attempt: int = 1) -> str:
    """Send one notification as its incident is now; a failure is retried by a schedule, up to
    NOTIFY_MAX_ATTEMPTS tries. Safe to run twice: a state already sent is not sent again (a PR comment is only
    edited when its text changes)."""
    n = (
        Notification.objects.select_related("incident__rule", "incident__backend", "channel")
        .filter(pk=notification_id)
        .first()
    )
    if n is None:
        return "gone"
    claim = claims.claim(Notification.objects.filter(pk=n.pk), "claimed_at", stale=_claim_stale())
    if claim is None:  # another sender is at it: this one comes back after it
        _send_again(n.pk, attempt, wait=settings.NOTIFY_RETRY_SECONDS)
        return "busy"
    try:
        return _notification_sent(n, attempt)
    finally:
        Notification.objects.filter(pk=n.pk, claimed_at=claim).update(claimed_at=None)


def notifications_resume(*, now: datetime) -> list[int]:
    """Send again the pending notifications whose send was lost: a worker killed with the task in hand (its claim
    lapses), or a retry whose schedule never ran. A notification counts as lost once its claim and twice its retry's
    wait have passed without a word; sending it again is safe (claims and markers). The alert schedule calls this."""
    stale = _claim_stale()
    pending = Notification.objects.filter(status=Notification.Status.PENDING, updated_at__lt=now - stale)
    pending = pending.filter(Q(claimed_at__isnull=True) | Q(claimed_at__lt=now - stale))
    lost = [
        (pk, attempts)
        for pk, attempts, updated in pending.values_list("pk", "attempts", "updated_at")
        if updated < now - stale - timedelta(seconds=settings.NOTIFY_RETRY_SECONDS * 2**attempts)
    ]
    for pk, attempts in lost:
        async_task("relay.tasks.notification_send", pk, attempts + 1)
    return [pk for pk, _ in lost]


def _claim_stale() -> timedelta:
    """How long a sender's claim holds: longer than its calls out can take."""
    return timedelta(seconds=4 * settings.GITHUB_TIMEOUT_SECONDS)


def _send_again(pk: int, attempt: int, *, wait: float) -> None:
    schedule(
        "relay.tasks.notification_send",
        pk,
        attempt,
        schedule_type=Schedule.ONCE,
        next_run=timezone.now() + timedelta(seconds=wait),
    )


def _notification_sent(n: Notification, attempt: int) -> str:
    """Send it (the channel's sender calls out, no transaction held) and record what happened after."""
    try:
        target = SENDERS[n.channel.kind](n)
    except SEND_ERRORS as e:
        n.attempts, n.last_error = attempt, " ".join(str(e).split())[:1000]
        if attempt >= settings.NOTIFY_MAX_ATTEMPTS:
            n.status = Notification.Status.FAILED
            n.save(update_fields=["attempts", "last_error", "status", "updated_at"])
            logger.warning("notification %s failed after %d tries: %s", n.pk, attempt, n.last_error)
            return "failed"
        n.save(update_fields=["attempts", "last_error", "updated_at"])
        _send_again(n.pk, attempt + 1, wait=settings.NOTIFY_RETRY_SECONDS * 2 ** (attempt - 1))
        return "retrying"
    n.status, n.attempts, n.last_error, n.target = Notification.Status.SENT, attempt, "", target
    n.sent_state = n.incident.state
    n.save(update_fields=["status", "attempts", "last_error", "target", "sent_state", "external_id", "updated_at"])
    return "sent"


# --- what an incident says ------------------------------------------------------------------------------------------


def incident_text(incident: Incident) -> str:
    state = "resolved" if incident.state == Incident.State.RESOLVED else "firing"
    link = ""
    if incident.backend is not None and settings.PUBLIC_URL:
        link = f" {settings.PUBLIC_URL.rstrip('/')}/oot/{incident.backend.repo}/"
    return f"[OOT CI] {state}: {incident.what}{link}"


def pr_comment_body(repo: str, number: int) -> str:
    """The PR's one comment, Dr.CI's way: a section per backend whose on-call channel carries PR comments (its latest
    incident on the PR), its jobs' failures grouped by verdict (``ootci.verdicts``) with evidence and links; the
    backends with failures first."""
    wanted = NotificationChannel.objects.filter(kind=Kind.PR_COMMENT, enabled=True).values("backend_id")
    latest: dict[int, Incident] = {}
    incidents = Incident.objects.filter(
        rule__kind=AlertRule.Kind.PR_TEST, pr_number=number, backend_id__in=wanted, details__upstream_repo=repo
    ).select_related("backend")
    for incident in incidents.order_by("-opened_at", "-pk"):
        latest.setdefault(incident.backend_id, incident)
    shown = sorted(latest.values(), key=lambda i: (i.state == Incident.State.RESOLVED, i.backend.repo))
    firing = sum(i.state == Incident.State.FIRING for i in shown)
    lines = [comment_marker(repo, number), "## OOT CI: out-of-tree backends on this PR", ""]
    lines.append(
        f"❌ {firing} backend(s) with failures this PR likely caused."
        if firing
        else "✅ No backend fails because of it."
    )
    for incident in shown:
        lines += ["", *_pr_section(incident)]
    lines += ["", 'This comment is edited in place as the jobs change. Verdicts: README "Verdicts".']
    return "\n".join(lines)


def _pr_section(incident: Incident) -> list[str]:
    backend = incident.backend
    lines = [f"### {backend.repo} ({backend.device or backend.level})"]
    if incident.state == Incident.State.RESOLVED:
        lines.append("✅ **Resolved**: no failure of this PR is left on this backend.")
    else:
        lines.append(f"❌ {incident.what}")
    lines += ["", f"On `{incident.details.get('sha', '')[:12]}`:"]
    groups: dict[str, list[str]] = {}
    for job in incident.details.get("jobs", []):
        if job["outcome"] not in ("test", "infra"):
            continue
        name = f"[{job['job']}]({job['url']})" if job.get("url") else job["job"]
        name += f" (attempt {job['attempt']})" if job.get("attempt", 1) > 1 else ""
        tests = job.get("tests") or []
        if not tests:
            named = ", ".join(f"`{t}`" for t in job.get("failed_tests", [])[:5])
            line = f"- {name}" + (f": {named}" if named else "")
            groups.setdefault(job.get("verdict") or verdicts.UNKNOWN, []).append(line)
        for t in tests:
            why = f" — {', '.join(t['evidence'])}" if t.get("evidence") else ""
            groups.setdefault(t["verdict"], []).append(f"- `{t['test_id']}` in {name}{why}")
    for verdict in verdicts.JOB_ORDER:
        if verdict in groups:
            shown = groups[verdict][:COMMENT_LINES]
            more = len(groups[verdict]) - len(shown)
            lines += ["", f"**{verdict.upper()}** — {verdicts.MEANING[verdict]}", *shown]
            lines += [f"- … and {more} more"] if more else []
    oncalls = ", ".join(f"@{h}" for h in backend.oncalls)
    return [*lines, "", f"On-call: {oncalls or 'none listed'}."]


# --- the channels ---------------------------------------------------------------------------------------------------


def pr_comment_send(n: Notification) -> str:
    """Create or edit the PR's one comment. The sender claims the PR's ``PrComment`` row by a conditional UPDATE and
    calls GitHub outside any transaction, recording after; before creating the comment it looks for ours by its
    marker, so a send that died after GitHub's answer (or whose answer was lost) is edited, never posted twice. A
    sender that finds the row claimed is retried later; the holder renders again until nothing changed meanwhile."""
    incident = n.incident
    repo, number = incident.details.get("upstream_repo") or settings.UPSTREAM_REPO, incident.pr_number
    row, _ = PrComment.objects.get_or_create(backend=None, upstream_repo=repo, pr_number=number)
    claim = claims.claim(PrComment.objects.filter(pk=row.pk), "claimed_at", stale=_claim_stale())
    if claim is None:
        raise github.GitHubError(f"another sender is writing the comment on {repo}#{number}", retryable=True)
    try:
        for _ in range(COMMENT_ROUNDS):
            row.refresh_from_db()
            body = pr_comment_body(repo, number)
            if row.comment_id is None:
                found = github.issue_comment_find(repo=repo, number=number, marker=comment_marker(repo, number))
                if found is None:
                    comment_id = github.issue_comment_create(repo=repo, number=number, body=body)
                else:
                    comment_id = found[0]
                    if found[1] != body:
                        github.issue_comment_update(repo=repo, comment_id=comment_id, body=body)
                PrComment.objects.filter(pk=row.pk).update(comment_id=comment_id, body=body)
            elif body != row.body:
                github.issue_comment_update(repo=repo, comment_id=row.comment_id, body=body)
                PrComment.objects.filter(pk=row.pk).update(body=body)
            if pr_comment_body(repo, number) == body:
                break  # no incident of the PR changed while GitHub was called
            renewed = timezone.now()
            if PrComment.objects.filter(pk=row.pk, claimed_at=claim).update(claimed_at=renewed):
                claim = renewed
    finally:
        PrComment.objects.filter(pk=row.pk, claimed_at=claim).update(claimed_at=None)
    return f"{repo}#{number}"


def comment_marker(repo: str, number: int) -> str:
    return f"<!-- oot-ci:{repo}#{number} -->"


def repo_issue_send(n: Notification) -> str:
    """Open the incident's issue (once: before creating one, ours is looked for by its marker, so a retry after a
    crash or a lost answer finds it), and close it when the incident resolves."""
    incident, repo = n.incident, n.incident.backend.repo
    marker = f"<!-- oot-ci:incident:{incident.pk} -->"
    text = incident.details.get("text") or ""  # a break's tests, suspects and bisection (relay.breaks.alerts)
    body = f"{incident_text(incident)}\n\n{text}\n\n" if text else f"{incident_text(incident)}\n\n"
    body += f"Opened {incident.opened_at:%Y-%m-%d %H:%M} UTC by OOT CI.\n{marker}"
    if not n.external_id and (found := github.issue_find(repo=repo, marker=marker)):
        n.external_id = str(found)
    if incident.state == Incident.State.FIRING and not n.external_id:
        n.external_id = str(github.issue_create(repo=repo, title=f"OOT CI: {incident.what}"[:250], body=body))
    elif incident.state == Incident.State.FIRING and text:
        github.issue_update(repo=repo, number=int(n.external_id), body=body)
    elif incident.state == Incident.State.RESOLVED and n.external_id and n.sent_state != Incident.State.RESOLVED:
        github.issue_close(repo=repo, number=int(n.external_id), body=body)
    return f"{repo}#{n.external_id}" if n.external_id else repo


def webhook_send(n: Notification) -> str:
    if n.sent_state == n.incident.state:
        return n.channel.target
    incident = n.incident
    payload = {
        "text": incident_text(incident),
        "incident": {
            "id": incident.pk,
            "state": incident.state,
            "what": incident.what,
            "rule": incident.rule.kind,
            "backend": incident.backend.repo if incident.backend else None,
            "opened_at": incident.opened_at.isoformat(),
            "resolved_at": incident.resolved_at.isoformat() if incident.resolved_at else None,
        },
    }
    response = requests.post(n.channel.target, json=payload, timeout=settings.GITHUB_TIMEOUT_SECONDS)
    if not 200 <= response.status_code < 300:
        raise requests.HTTPError(f"webhook answered {response.status_code}: {response.text[:200]}")
    return n.channel.target


def email_send(n: Notification) -> str:
    if n.sent_state == n.incident.state:
        return n.channel.target
    to = [a.strip() for a in n.channel.target.split(",") if a.strip()]
    text = incident_text(n.incident)
    send_mail(subject=text[:200], message=text, from_email=None, recipient_list=to)
    return ", ".join(to)


SENDERS = {
    Kind.PR_COMMENT: pr_comment_send,
    Kind.REPO_ISSUE: repo_issue_send,
    Kind.WEBHOOK: webhook_send,
    Kind.EMAIL: email_send,
}
