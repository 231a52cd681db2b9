"""Level governance services: readiness verdicts with their notices, reviewed level changes, the schedule's
proposals, temporary downgrades and their restoration, and the evidence for PyTorch's allowlist pull request.

Every level move here goes through ``Backend.change_level`` (its LevelChange audit row) and gets a LevelReview that
keeps the figures it was decided on.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from ootci import allowlist, gates, ledger, levels
from ootci.environment import HARDWARE_KEYS
from ootci.models import Backend, GateNotice, JobResult, LevelReview, TemporaryDowngrade

SCHEDULE_ACTOR = "readiness schedule"


# --- verdicts --------------------------------------------------------------------------------------------------------


def readiness_judged(levels_: dict[int, str], figures: gates.Figures, *, now: datetime) -> dict[int, gates.Readiness]:
    """The verdict of each backend (id → its level) from its figures and its gate notice (since when its gates
    fail)."""
    notices = dict(GateNotice.objects.filter(backend__in=list(levels_)).values_list("backend_id", "failing_since"))
    return {
        bid: gates.judge(level, *figures.get(bid, gates.empty_figures()), failing_since=notices.get(bid), now=now)
        for bid, level in levels_.items()
    }


def readiness_now(backends: Iterable[Backend], *, now: datetime | None = None) -> dict[int, gates.Readiness]:
    """The verdicts of ``backends``: at ``now`` when given (computed), else from the figures cached by the HUD."""
    levels_ = {b.pk: b.level for b in backends}
    return readiness_judged(levels_, gates.figures_source()(now=now), now=now or timezone.now())


def readiness_record(r: gates.Readiness) -> dict:
    """A verdict as JSON, for a review's ``figures`` and the readiness API."""
    record = dataclasses.asdict(r)
    for key in ("failing_since", "demotion_due"):
        record[key] = record[key].isoformat() if record[key] else None
    for side in ("promotion", "demotion"):
        f = getattr(r, side)
        rates = ("total", "success_rate", "infra_failure_rate", "overrun_rate", "timeout_rate")
        record[side] |= {
            name: getattr(f, name) for name in (*rates, "queue_avg_minutes", "dependency_avg_minutes", "e2e_p50_hours")
        }
        record[side]["test_failure_rate"] = f.failed_tests_rate
    return record


# --- reviewed changes ------------------------------------------------------------------------------------------------


def level_change_reviewed(
    *, backend: Backend, to: str, reason: str, user=None, actor: str = "", readiness: gates.Readiness | None = None
) -> LevelReview | None:
    """Move ``backend`` to ``to`` with its review (the readiness it was decided on); an open proposal is closed."""
    if not reason.strip():
        raise ValueError("A level change needs a reason.")
    readiness = readiness or readiness_now([backend])[backend.pk]
    from_level = backend.level
    with transaction.atomic():
        change = backend.change_level(to, user=user, actor=actor, reason=reason)
        if change is None:
            return None
        open_ = LevelReview.objects.filter(backend=backend, state=LevelReview.State.PROPOSED)
        open_.update(state=LevelReview.State.DISMISSED)
        return _review(backend, LevelReview.Kind.CHANGE, from_level, to, readiness, reason, user, actor, change)


def allowlist_applied(changes: allowlist.Plan, *, actor: str, reason: str) -> list[LevelReview]:
    """Apply an allowlist import (``allowlist.apply``) with a review of every level move of an existing backend, as
    an admin's change gets one: the readiness figures it was decided on; open proposals for those backends close."""
    moving = [backend for backend, entry in changes.update if backend.level != entry.level]
    readiness = readiness_now(moving) if moving else {}
    with transaction.atomic():
        moves = allowlist.apply(changes, actor=actor, reason=reason)
        proposals = LevelReview.objects.filter(backend__in=[c.backend_id for c in moves])
        proposals.filter(state=LevelReview.State.PROPOSED).update(state=LevelReview.State.DISMISSED)
        kind = LevelReview.Kind.CHANGE
        return [
            _review(c.backend, kind, c.from_level, c.to_level, readiness[c.backend_id], reason, actor=actor, change=c)
            for c in moves
        ]


def _review(backend, kind, from_level, to, readiness, reason, user=None, actor="", change=None) -> LevelReview:
    state = LevelReview.State.PROPOSED if kind == LevelReview.Kind.PROPOSAL else LevelReview.State.APPLIED
    return LevelReview.objects.create(
        backend=backend,
        kind=kind,
        state=state,
        from_level=from_level,
        to_level=to,
        promotion_days=gates.PROMOTION_DAYS,
        demotion_days=gates.DEMOTION_DAYS,
        figures=readiness_record(readiness),
        verdict=readiness.verdict,
        verdict_text=readiness.text,
        reason=reason,
        reviewer=user,
        actor=actor or (user.get_username() if user else ""),
        level_change=change,
    )


# --- temporary downgrades -------------------------------------------------------------------------------------------


def downgrade_start(
    *,
    backend: Backend,
    to: str,
    reason: str,
    until: datetime | None = None,
    recover_days: int | None = None,
    user=None,
) -> TemporaryDowngrade:
    """Run an L3/L4 backend at the lower level ``to`` until ``until`` or until its gates pass for ``recover_days``."""
    if backend.level not in (levels.Level.L3, levels.Level.L4) or levels.rank(to) >= levels.rank(backend.level):
        raise ValueError(f"A temporary downgrade takes an L3 or L4 backend lower; {backend.level} → {to} is not one.")
    if until is None and not recover_days:
        raise ValueError("A temporary downgrade needs an end: a date, or a number of days of passing gates.")
    if not reason.strip():
        raise ValueError("A temporary downgrade needs a reason.")
    readiness = readiness_now([backend])[backend.pk]
    with transaction.atomic():
        down = TemporaryDowngrade.objects.create(
            backend=backend,
            restore_to=backend.level,
            effective=to,
            until=until,
            recover_days=recover_days,
            reason=reason,
        )
        why = f"temporary downgrade: {reason}"
        from_level = backend.level
        change = backend.change_level(to, user=user, reason=why)
        _review(backend, LevelReview.Kind.DOWNGRADE, from_level, to, readiness, why, user, change=change)
    return down


def downgrade_restore(*, downgrade: TemporaryDowngrade, why: str, readiness: gates.Readiness, now: datetime) -> None:
    backend = downgrade.backend
    with transaction.atomic():
        downgrade.ended_at = now
        downgrade.save(update_fields=["ended_at"])
        from_level = backend.level
        reason = f"temporary downgrade ended: {why}"
        change = backend.change_level(downgrade.restore_to, actor=SCHEDULE_ACTOR, reason=reason, at=now)
        _review(backend, LevelReview.Kind.RESTORE, from_level, downgrade.restore_to, readiness, reason, change=change)


def _downgrade_due(down: TemporaryDowngrade, readiness: gates.Readiness, now: datetime) -> str:
    """Why ``down`` ends now ("" while it goes on); keeps its ``passing_since`` up to date."""
    if down.until is not None and now >= down.until:
        return f"its end date {down.until:%Y-%m-%d} came"
    if not down.recover_days:
        return ""
    own = gates.evaluate(down.restore_to, readiness.demotion)
    passing = bool(own) and all(r.passed for r in own)
    if not passing:
        if down.passing_since is not None:
            down.passing_since = None
            down.save(update_fields=["passing_since"])
        return ""
    if down.passing_since is None:
        down.passing_since = now
        down.save(update_fields=["passing_since"])
    if now - down.passing_since >= timedelta(days=down.recover_days):
        return f"the {down.restore_to} gates passed for {down.recover_days} days"
    return ""


# --- the schedule ----------------------------------------------------------------------------------------------------


def readiness_review(*, now: datetime | None = None) -> dict[str, int]:
    """The readiness schedule: keep gate notices, propose promotions and due demotions (never apply them), and end
    temporary downgrades whose end condition is met. Safe to run twice (one open proposal per backend)."""
    every = list(Backend.objects.filter(enabled=True, probe=False))  # the relay's probe is no candidate
    judged = readiness_now(every, now=now)  # without ``now``, from the figures the HUD caches
    now = now or timezone.now()
    done = {"notices": 0, "proposals": 0, "restored": 0}
    for backend in every:
        r = judged[backend.pk]
        done["notices"] += _notice_keep(backend, r, now)
        done["proposals"] += _propose(backend, r)
    for down in TemporaryDowngrade.objects.filter(ended_at=None, backend__in=every).select_related("backend"):
        why = _downgrade_due(down, judged[down.backend_id], now)
        if why:
            downgrade_restore(downgrade=down, why=why, readiness=judged[down.backend_id], now=now)
            done["restored"] += 1
    return done


def _notice_keep(backend: Backend, r: gates.Readiness, now: datetime) -> int:
    if not r.failing:
        GateNotice.objects.filter(backend=backend).delete()
        return 0
    _, created = GateNotice.objects.update_or_create(
        backend=backend, defaults={"gates": r.failing}, create_defaults={"gates": r.failing, "failing_since": now}
    )
    return int(created)


def _propose(backend: Backend, r: gates.Readiness) -> int:
    if r.verdict == "below":
        to = levels.demoted(backend.level)
    elif r.verdict == "eligible" and r.target in (levels.Level.L3, levels.Level.L4):
        to = r.target
    else:
        return 0
    if to is None or (to == levels.Level.L3 and not backend.device):
        return 0
    if LevelReview.objects.filter(backend=backend, state=LevelReview.State.PROPOSED, to_level=to).exists():
        return 0
    try:
        with transaction.atomic():
            LevelReview.objects.filter(backend=backend, state=LevelReview.State.PROPOSED).update(
                state=LevelReview.State.DISMISSED
            )
            _review(backend, LevelReview.Kind.PROPOSAL, backend.level, to, r, r.text, actor=SCHEDULE_ACTOR)
    except IntegrityError:  # a concurrent run proposed it first
        return 0
    return 1


# --- evidence ---------------------------------------------------------------------------------------------------------


def evidence_markdown(review: LevelReview) -> str:
    """A Markdown summary of ``review``, ready for the pull request that changes PyTorch's allowlist file: the
    verdict, each gate with its value and limit over both windows, the rates beside them, and the YAML diff."""
    f = review.figures
    lines = [
        f"## {review.backend.repo}: {review.from_level} → {review.to_level}",
        "",
        f"Verdict: **{review.verdict_text or review.verdict}** · reason: {review.reason or '—'}",
        "",
        f"Figures: latest attempts of `{gates.EVENT}` jobs; promotion window {review.promotion_days} days,"
        f" demotion window {review.demotion_days} days, as evaluated {review.created_at:%Y-%m-%d %H:%M} UTC.",
        "",
        "| gate | window | value | limit | |",
        "|---|---|---|---|---|",
    ]
    for side, key in (("promotion", "promotion_gates"), ("demotion", "demotion_gates")):
        for g in f.get(key, []):
            gate, value, passed = g["gate"], g["value"], g["passed"]
            shown = "no data" if value is None else f"{value:g} {gate['unit']}"
            mark = "no data" if passed is None else ("pass" if passed else "FAIL")
            days = f[side]["days"]
            lines.append(f"| {gate['label']} | {days} d | {shown} | < {gate['limit']:g} {gate['unit']} | {mark} |")
    lines += ["", "| window | jobs | success | test failures | infra failures |", "|---|---|---|---|---|"]
    for side in ("promotion", "demotion"):
        w = f[side]
        lines.append(
            f"| {w['days']} d | {w['total']} | {_pct(w['success_rate'])} | {_pct(w['test_failure_rate'])} |"
            f" {_pct(w['infra_failure_rate'])} |"
        )
    lines += _where_and_coverage(review)
    before = allowlist.export_yaml({review.backend_id: review.from_level})
    after = allowlist.export_yaml({review.backend_id: review.to_level})
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), "allowlist.yml", "allowlist.yml", lineterm="")
    lines += ["", "```diff", *diff, "```", ""]
    return "\n".join(lines)


def _where_and_coverage(review: LevelReview) -> list[str]:
    """Hardware information (RFC-0050 asks L1 backends for it) and test coverage (an L4 factor) over the promotion
    window, as evaluated: shown, not gated."""
    since = review.created_at - timedelta(days=review.promotion_days)
    jobs = JobResult.objects.filter(
        backend_id=review.backend_id, finished_at__gte=since, finished_at__lte=review.created_at
    )
    envs = list(jobs.values_list("environment", flat=True))
    named = [env for env in envs if any(env.get(key) for key in HARDWARE_KEYS)]
    devices = sorted(
        {
            f"{e['device']}" + (f" × {e['device_count']}" if e.get("device_count") else "")
            for e in named
            if e.get("device")
        }
    )
    runners = sorted({e["runner"] for e in named if e.get("runner")})
    share = f"{100 * len(named) / len(envs):.1f} %" if envs else "no jobs"
    c = ledger.coverage_totals(review.backend_id, since=review.created_at - timedelta(days=90))
    return [
        "",
        f"Hardware information: {len(named)} of {len(envs)} jobs ({share}) over {review.promotion_days} days name their"
        f" device or runner; devices: {', '.join(devices) or '—'}; runners: {len(runners)}.",
        "",
        f"Coverage (shown, not gated; newest baseline run of each of {c.runs} job(s) over 90 days): {c.collected}"
        f" upstream tests collected, {c.passed} passed, {c.failed} failed, {c.skipped} skipped"
        f" ({_pct(c.skipped_percent)}), {c.disabled} on its disabled list.",
    ]


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:g} %"
