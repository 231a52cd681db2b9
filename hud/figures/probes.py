"""The relay-health cards of the summary page: what the relay's probe (``Backend.probe``, e.g. pytorch/crcr-test: a
repository whose jobs exercise the relay end to end, expected-outcome jobs ``xfail``/``xcancel``/``xtimeout`` among
them) says of the relay.

Two cards per probe, each over its last SAMPLES samples:

- **pull requests** — its last 5 upstream PRs (the head SHA it was last dispatched or reported on);
- **nightly** — its last 5 nightly SHAs.

A card is **Healthy** when every job of every sample ended as expected (``JobResult.outcome`` success: a plain job
succeeded, an expected-outcome job met its expectation) and nothing is late; **Degraded**, with the reason, as soon as
one sample — even one — had an unexpected outcome (a test or infrastructure failure), or a result did not arrive within
its cadence: a PR dispatch unanswered past the probe's grace (``stale_grace_minutes``; a failed dispatch at once), the
newest nightly older than its cadence + grace (``ootci.staleness``' rule), or no sample at all. Running jobs are
neither. The probe itself is left out of the backends' figures (``hud.stores.allowlisted.shown``).

Reads a few indexed rows of one backend from the database (the probe's jobs, its dispatches), whatever the store.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from hud.stores import allowlisted
from hud.stores.base import latest_attempts
from hud.stores.types import BackendInfo, ProbeCard, ProbeSample
from ootci.events import Event
from ootci.models import Backend, Dispatch, JobResult

SAMPLES = 5
UNEXPECTED = (JobResult.Outcome.TEST, JobResult.Outcome.INFRA)
FIELDS = ("id", *JobResult.JOB_FIELDS, "pr_number", "conclusion", "outcome", "finished_at", "created_at")


def cards(*, now: datetime) -> list[ProbeCard]:
    """Every probe's two cards (none without a probe)."""
    found = []
    for probe in allowlisted.probes():
        backend = Backend.objects.get(pk=probe.id)
        found += [pull_request_card(probe, backend, now=now), nightly_card(probe, backend, now=now)]
    return found


def pull_request_card(probe: BackendInfo, backend: Backend, *, now: datetime) -> ProbeCard:
    grace = timedelta(minutes=backend.stale_grace_minutes)
    heads: dict[int, tuple[str, datetime, Dispatch | None]] = {}  # PR → (SHA, last seen, its newest dispatch)
    dispatches = (
        Dispatch.objects.filter(backend_id=probe.id, delivery__event=Event.PULL_REQUEST)
        .exclude(delivery__pull_request=None)
        .select_related("delivery__pull_request")
        .order_by("-created_at", "-id")
    )
    for d in dispatches[: SAMPLES * 4]:
        heads.setdefault(d.delivery.pull_request.number, (d.delivery.head_sha, d.created_at, d))
    reported = (
        JobResult.objects.filter(backend_id=probe.id, event_type=Event.PULL_REQUEST, pr_number__isnull=False)
        .order_by("-created_at", "-id")
        .values_list("pr_number", "job_sha", "created_at")
    )
    for number, sha, at in reported[: SAMPLES * 20]:
        if number not in heads or heads[number][1] < at and heads[number][0] != sha:
            heads[number] = (sha, at, None)
    newest = sorted(heads.items(), key=lambda item: item[1][1], reverse=True)[:SAMPLES]
    jobs = _latest(probe.id, Event.PULL_REQUEST, [sha for _, (sha, _, _) in newest])
    samples = []
    for number, (sha, at, dispatch) in newest:
        mine = jobs.get(sha, [])
        missing = "" if mine else _unanswered(dispatch, grace, now)
        samples.append(_sample(number, sha, at, mine, missing))
    return _card(probe, Event.PULL_REQUEST, "Pull requests", samples, late="")


def nightly_card(probe: BackendInfo, backend: Backend, *, now: datetime) -> ProbeCard:
    rows = (
        JobResult.objects.filter(backend_id=probe.id, event_type=Event.NIGHTLY)
        .order_by("-finished_at", "-id")
        .values_list("job_sha", "finished_at")
    )
    shas: dict[str, datetime] = {}
    for sha, at in rows[: SAMPLES * 50]:
        shas.setdefault(sha, at)
        if len(shas) == SAMPLES:
            break
    jobs = _latest(probe.id, Event.NIGHTLY, list(shas))
    samples = [_sample(None, sha, at, jobs.get(sha, []), "") for sha, at in shas.items()]
    late = ""
    cadence = timedelta(minutes=backend.nightly_cadence_minutes)
    if samples and now - samples[0].at > cadence + timedelta(minutes=backend.stale_grace_minutes):
        late = f"no nightly result for {_hours(now - samples[0].at)} (expected every {_hours(cadence)})"
    return _card(probe, Event.NIGHTLY, "Nightly", samples, late=late)


def _latest(backend_id: int, event: str, shas: list[str]) -> dict[str, list[dict]]:
    """The latest attempts of the probe's ``event`` jobs on ``shas``, by SHA."""
    rows = JobResult.objects.filter(backend_id=backend_id, event_type=event, job_sha__in=shas)
    found: dict[str, list[dict]] = {}
    for r in latest_attempts(rows.order_by(*JobResult.LATEST_ORDER).values(*FIELDS)):
        found.setdefault(r["job_sha"], []).append(r)
    return found


def _sample(number: int | None, sha: str, at: datetime, jobs: list[dict], missing: str) -> ProbeSample:
    unexpected = tuple(
        sorted(
            f"{r['workflow_name']} / {r['job_name']} ({r['conclusion']})" for r in jobs if r["outcome"] in UNEXPECTED
        )
    )
    return ProbeSample(number, sha, at, len(jobs), unexpected, missing)


def _unanswered(dispatch: Dispatch | None, grace: timedelta, now: datetime) -> str:
    if dispatch is None:
        return ""
    if dispatch.status == Dispatch.Status.FAILED:
        return f"its dispatch failed: {dispatch.last_error or 'no reason recorded'}"
    if now - dispatch.created_at > grace:
        return f"dispatched {_hours(now - dispatch.created_at)} ago, no result within {_hours(grace)}"
    return ""


def _card(probe: BackendInfo, kind: str, title: str, samples: list[ProbeSample], *, late: str) -> ProbeCard:
    what = "pull request" if kind == Event.PULL_REQUEST else "nightly"
    reasons = [late] if late else []
    if not samples:
        reasons.append(f"no {what} results from {probe.repo} yet")
    for s in samples:
        name = f"PR #{s.pr_number}" if s.pr_number else s.sha[:12]
        if s.unexpected:
            reasons.append(f"{name}: unexpected outcome of {', '.join(s.unexpected)}")
        if s.missing:
            reasons.append(f"{name}: {s.missing}")
    if reasons:
        return ProbeCard(probe, kind, title, "Degraded", "; ".join(reasons), samples)
    n = len(samples)
    reason = (
        f"the last {n} {what}{'s' if n > 1 and what != 'nightly' else ''} of {probe.repo}: every outcome as expected"
    )
    return ProbeCard(probe, kind, title, "Healthy", reason, samples)


def _hours(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60} h" if minutes >= 120 else f"{minutes} min"
