"""Level gates: what a backend's CI must show, over fixed windows, to reach or to keep a level. The one table.

RFC-0050 left the L3 bar open; the reference deployment's readiness work (pytorch/test-infra 8635, 8754, 8693 and
pytorch/rfcs 102) settled it: average queue time under 30 minutes, overrun rate (jobs running longer than 3 hours)
under 1 %, end-to-end P50 per upstream event under 3 hours, timeout rate under 1 %; success, infrastructure-failure
and test-failure rates are shown beside them but gate nothing. The queue-time gate reads the **workflow queue time**
(per workflow run: dispatch to the run's first in_progress, ``ootci.jobs``); the wait of a run's later jobs for the
jobs they depend on is its own figure, shown beside it ("waiting for dependencies"), gating nothing. A backend is
judged for promotion against the next level's gates over the last ``PROMOTION_DAYS`` and for keeping its level against
its own level's gates over the last ``DEMOTION_DAYS``, whatever window a page shows. Settings may override a limit
(``LEVEL_GATES``).

Every gate is "value strictly under the limit", compared on exact integers or unrounded figures (a rate as
``100 × part < limit × whole``), so a fixture at a threshold's edge lands on the side this module says. The figures
come from the HUD's stores, which register their function at start-up (:func:`figures_from`): ootci does not import
the read side, and this module is pure (figures and a level in, a verdict out).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from ootci import levels

PROMOTION_DAYS = 14
DEMOTION_DAYS = 7
NOTICE_WORKING_DAYS = 2  # a backend below its level's gates is demoted this many working days after the notice
OVERRUN_HOURS = 3.0  # a job running longer than this is an overrun
EVENT = "pull_request"  # the upstream event the gates are judged on: what L3/L4 check runs report on


@dataclass(frozen=True)
class Gate:
    name: str  # a WindowFigures attribute, in ``unit``
    short: str  # for a table cell
    label: str
    limit: float  # the value must be strictly under this
    unit: str  # "min" | "%" | "h"


_L3 = (
    Gate("queue_avg_minutes", "queue", "average queue time", 30.0, "min"),
    Gate("overrun_rate", "overrun", f"overrun rate (jobs over {OVERRUN_HOURS:g} h)", 1.0, "%"),
    Gate("e2e_p50_hours", "E2E p50", "end-to-end P50 per upstream event", 3.0, "h"),
    Gate("timeout_rate", "timeout", "timeout rate", 1.0, "%"),
)
# level → the gates a backend at that level must pass. L1 and L2 need none (L2 only asks that the HUD shows it);
# L4 holds the L3 gates until the RFC settles stricter ones (override them with LEVEL_GATES).
GATES: dict[str, tuple[Gate, ...]] = {"L1": (), "L2": (), "L3": _L3, "L4": _L3}


def gates(level: str) -> tuple[Gate, ...]:
    """The gates of ``level``, with the limits ``settings.LEVEL_GATES`` ({level: {gate name: limit}}) overrides."""
    override = settings.LEVEL_GATES.get(level, {})
    return tuple(replace(g, limit=float(override[g.name])) if g.name in override else g for g in GATES[level])


@dataclass(frozen=True)
class WindowFigures:
    """A backend's latest attempts of ``EVENT`` jobs finished in the last ``days`` (lost dispatches are infra
    failures), unrounded: counts, the average workflow queue time (one per workflow run), the average wait of later
    jobs for their dependencies and the median end-to-end time per upstream event, seconds."""

    days: int
    successes: int = 0
    test_failures: int = 0
    infra_failures: int = 0
    timed_out: int = 0
    overruns: int = 0
    queue_avg: float | None = None
    e2e_p50: float | None = None
    dependency_avg: float | None = None  # shown beside the queue gate, gates nothing

    @property
    def total(self) -> int:
        return self.successes + self.test_failures + self.infra_failures

    def _rate(self, part: int) -> float | None:
        return round(100.0 * part / self.total, 2) if self.total else None

    @property
    def success_rate(self) -> float | None:
        return self._rate(self.successes)

    @property
    def failed_tests_rate(self) -> float | None:
        return self._rate(self.test_failures)

    @property
    def infra_failure_rate(self) -> float | None:
        return self._rate(self.infra_failures)

    @property
    def overrun_rate(self) -> float | None:
        return self._rate(self.overruns)

    @property
    def timeout_rate(self) -> float | None:
        return self._rate(self.timed_out)

    @property
    def queue_avg_minutes(self) -> float | None:
        return None if self.queue_avg is None else round(self.queue_avg / 60, 2)

    @property
    def dependency_avg_minutes(self) -> float | None:
        return None if self.dependency_avg is None else round(self.dependency_avg / 60, 2)

    @property
    def e2e_p50_hours(self) -> float | None:
        return None if self.e2e_p50 is None else round(self.e2e_p50 / 3600, 2)


def passes(gate: Gate, f: WindowFigures) -> bool | None:
    """Whether ``f`` is strictly under the gate, compared exactly; None when the window has no figure for it."""
    if not f.total:
        return None
    if gate.name == "queue_avg_minutes":
        return None if f.queue_avg is None else f.queue_avg < gate.limit * 60
    if gate.name == "e2e_p50_hours":
        return None if f.e2e_p50 is None else f.e2e_p50 < gate.limit * 3600
    part = {"overrun_rate": f.overruns, "timeout_rate": f.timed_out}[gate.name]
    return 100 * part < gate.limit * f.total


@dataclass(frozen=True)
class GateResult:
    gate: Gate
    value: float | None  # in the gate's unit, rounded for display
    passed: bool | None  # None: no data


def evaluate(level: str, f: WindowFigures) -> list[GateResult]:
    return [GateResult(g, getattr(f, g.name), passes(g, f)) for g in gates(level)]


@dataclass(frozen=True)
class Readiness:
    """A backend against the gates: ``verdict`` is one of VERDICTS, ``text`` says it in a sentence."""

    level: str
    target: str | None  # the level it is judged for promotion to (None at the top)
    promotion: WindowFigures
    demotion: WindowFigures
    promotion_gates: list[GateResult]  # the target's gates over the promotion window
    demotion_gates: list[GateResult]  # its own level's gates over the demotion window
    verdict: str
    text: str
    failing_since: datetime | None = None
    demotion_due: date | None = None
    failing: list[str] = field(default_factory=list)  # names of the gates failing now (demotion window)

    @property
    def eligible(self) -> bool:
        return self.verdict == "eligible"

    @property
    def shown(self) -> list[GateResult]:
        """The gates a one-line summary shows: its own level's while they fail or when no level is above, else the
        next level's."""
        return self.demotion_gates if self.failing or not self.promotion_gates else self.promotion_gates

    @property
    def badge(self) -> str:
        """The badge class of the verdict: ok, neutral, bad or none."""
        return {"eligible": "ok", "holds": "ok", "not-yet": "neutral", "at-risk": "bad", "below": "bad"}.get(
            self.verdict, "none"
        )


VERDICTS = {
    "eligible": "eligible for promotion",
    "not-yet": "not yet eligible",
    "holds": "holds its level",
    "at-risk": "at risk",
    "below": "below its level",
    "no-data": "no data",
}


def working_days_after(start: date, n: int) -> date:
    day = start
    while n:
        day += timedelta(days=1)
        if day.weekday() < 5:
            n -= 1
    return day


def judge(
    level: str, promotion: WindowFigures, demotion: WindowFigures, *, failing_since: datetime | None, now: datetime
) -> Readiness:
    """The verdict for a backend at ``level``. Its own gates over the demotion window first: failing ones put it at
    risk (notice given ``failing_since``, or now) and, ``NOTICE_WORKING_DAYS`` working days later, below its level
    with a demotion due; otherwise the next level's gates over the promotion window say whether it is eligible."""
    target = levels.promoted(level)
    up = evaluate(target, promotion) if target else []
    own = evaluate(level, demotion)
    failing = [r.gate.name for r in own if r.passed is False]
    base = {"level": level, "target": target, "promotion": promotion, "demotion": demotion}
    base |= {"promotion_gates": up, "demotion_gates": own, "failing": failing}
    if failing:
        since = failing_since or now
        due = working_days_after(since.date(), NOTICE_WORKING_DAYS)
        n = f"{len(failing)} gate{'s' if len(failing) > 1 else ''} failing"
        if now.date() < due:
            text = f"at risk: {n} since {since.date():%Y-%m-%d}, demotion due {due:%Y-%m-%d}"
            return Readiness(**base, verdict="at-risk", text=text, failing_since=since, demotion_due=due)
        text = f"below its level since {since.date():%Y-%m-%d}, demotion due {due:%Y-%m-%d}"
        return Readiness(**base, verdict="below", text=text, failing_since=since, demotion_due=due)
    if not promotion.total and not demotion.total:
        return Readiness(**base, verdict="no-data", text=f"no {EVENT} jobs in the last {PROMOTION_DAYS} days")
    if target and up and all(r.passed for r in up):
        return Readiness(**base, verdict="eligible", text=f"eligible for {target}")
    if target and up:
        missing = sum(r.passed is not True for r in up)
        return Readiness(**base, verdict="not-yet", text=f"not yet eligible for {target}: {missing} gate(s) not met")
    if target:  # the next level has no gates (L1 → L2)
        return Readiness(**base, verdict="eligible", text=f"eligible for {target} (it has no gates)")
    return Readiness(**base, verdict="holds", text=f"holds {level}")


# --- figures from the read side ------------------------------------------------------------------------------------

Figures = dict[int, tuple[WindowFigures, WindowFigures]]  # backend id → (promotion window, demotion window)


_source: dict[str, Callable[..., Figures]] = {}


def figures_from(source: Callable[..., Figures]) -> None:
    """Register the function that computes readiness figures (keyword ``now``): the HUD's, when its app is ready."""
    _source["figures"] = source


def figures_source() -> Callable[..., Figures]:
    """The function that computes readiness figures (:func:`figures_from`)."""
    if "figures" not in _source:
        raise ImproperlyConfigured("No readiness figures: add the hud app to INSTALLED_APPS, which registers them.")
    return _source["figures"]


def empty_figures() -> tuple[WindowFigures, WindowFigures]:
    return WindowFigures(PROMOTION_DAYS), WindowFigures(DEMOTION_DAYS)
