"""Display helpers for the HUD templates: numbers, times, letters and colours, charts."""

import re
from datetime import UTC, datetime

from django import template
from django.http import QueryDict
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from hud.web import charts

register = template.Library()

LETTERS = {"success": "O", "failure": "X", "cancelled": "C", "timed_out": "T", "skipped": "S", "neutral": "N"}
OUTCOME_TEXT = {
    "success": "success",
    "test": "test failure",
    "infra": "infrastructure failure",
    "running": "running",
    "skipped": "skipped",
}
BAND_TEXT = {"good": "good", "fair": "fair", "poor": "poor", "none": "no data"}


@register.filter
def duration(seconds: float | None) -> str:
    """12s, 3.5m, 1.2h, 2.0d; "n/a" when unknown."""
    if seconds is None:
        return "n/a"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


@register.filter
def pct(value: float | None) -> str:
    return "no data" if value is None else f"{value:.1f}%"


@register.filter
def band(value: float | None) -> str:
    return charts.band(value)


@register.filter
def band_text(value: float | None) -> str:
    return BAND_TEXT[charts.band(value)]


@register.filter
def letter(job) -> str:
    """The HUD letter: O X C T S N, ? while running, U for anything else."""
    if job.outcome == "running":
        return "?"
    return LETTERS.get(job.conclusion, "U")


@register.filter
def outcome_text(job) -> str:
    return OUTCOME_TEXT.get(job.outcome, job.outcome)


@register.filter
def short_sha(sha: str) -> str:
    return (sha or "")[:7]


@register.filter
def ago(moment: datetime | None) -> str:
    if moment is None:
        return "never"
    seconds = (timezone.now() - moment).total_seconds()
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m ago"
    if seconds < 86400:
        return f"{seconds // 3600:.0f}h ago"
    return f"{seconds // 86400:.0f}d ago"


@register.filter
def utc(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if moment else "—"


@register.filter
def level_name(level: str) -> str:
    return {"L4": "merge-blocking", "L3": "check run with label", "L2": "HUD only", "L1": "dispatch only"}.get(
        level, ""
    )


@register.filter
def event_name(event: str) -> str:
    return {"pull_request": "Pull requests", "push": "Push", "nightly": "Nightly", "periodic": "Periodic"}[event]


@register.simple_tag
def sparkline(points):
    return charts.sparkline(points)


@register.simple_tag
def line_chart(series):
    return charts.line_chart(series)


@register.simple_tag
def skip_chart(points):
    return charts.skip_chart(points)


@register.filter
def environment_text(env: dict | None) -> str:
    """Where a job ran, in one line: device × count, driver, SDK, torch, OS, runner (ootci.environment)."""
    if not env:
        return ""
    device = (
        f"{env['device']}" + (f" × {env['device_count']}" if env.get("device_count") else "")
        if env.get("device")
        else ""
    )
    parts = [
        device,
        env.get("driver", ""),
        env.get("sdk", ""),
        env.get("torch_version", "") and f"torch {env['torch_version']}",
    ]
    parts += [env.get("os", ""), env.get("runner", "") and f"runner {env['runner']}"]
    return " · ".join(str(p) for p in parts if p)


@register.filter
def backend_colour(backend_id: int) -> str:
    return charts.backend_colour(backend_id)


@register.simple_tag(takes_context=True)
def query(context, **changes) -> str:
    """The current query string with ``changes`` applied (None removes a key); page resets unless given."""
    params: QueryDict = context["request"].GET.copy()
    params.pop("page", None)
    for key, value in changes.items():
        if value is None or value is False or value == "":
            params.pop(key, None)
        else:
            params[key] = value
    encoded = params.urlencode()
    return f"?{encoded}" if encoded else "?"


@register.simple_tag
def hud_settings() -> dict:
    from django.conf import settings

    from hud.figures.queries import EVENTS
    from ootci import gates

    return {
        "good": f"{settings.HUD_PASS_RATE_GOOD:g}",
        "gates": {level: gates.gates(level) for level in ("L3", "L4")},
        "promotion_days": gates.PROMOTION_DAYS,
        "demotion_days": gates.DEMOTION_DAYS,
        "notice_days": gates.NOTICE_WORKING_DAYS,
        "zombie": f"{settings.ZOMBIE_TIMEOUT_HOURS:g}",
        "outage_jobs": settings.AUTO_RETRY_OUTAGE_JOBS,
        "events": EVENTS,
        "upstream": settings.UPSTREAM_REPO,
    }


@register.filter
def gate_value(result) -> str:
    """A gate's value with its unit, or "no data"."""
    return "no data" if result.value is None else f"{result.value:g} {result.gate.unit}"


@register.filter
def get(mapping: dict | None, key):
    return mapping.get(key) if mapping else None


@register.filter
def by_day(series) -> list[dict]:
    """Metrics series turned into table rows: one per day, newest first, a point per backend."""
    if not series:
        return []
    days = [p.day for p in series[0].days]
    return [{"date": day, "points": [s.days[i] for s in series]} for i, day in reversed(list(enumerate(days)))]


@register.filter
def event_noun(event: str) -> str:
    return {"pull_request": "pull-request"}.get(event, event)


SHARD = re.compile(r"^(?P<base>.+?) \((?P<config>[^,()]+), (?P<shard>\d+), (?P<total>\d+)(?:, [^()]*)?\)$")


@register.filter
def column_groups(columns: list[str]) -> list[dict]:
    """Header groups over consecutive shards of one job (``test (default, 1, 3)``…), as PyTorch's HUD shows them;
    empty when no job is sharded, so the matrix keeps its single header row."""
    groups: list[dict] = []
    for column in columns:
        found = SHARD.match(column)
        label = f"{found['base']} ({found['config']})" if found else None
        if label and groups and groups[-1]["label"] == label:
            groups[-1]["span"] += 1
        else:
            groups.append({"label": label or column, "span": 1})
    return groups if any(g["span"] > 1 for g in groups) else []


@register.filter
def shard_label(column: str) -> str:
    found = SHARD.match(column)
    return f"{found['shard']}/{found['total']}" if found else column


@register.filter
def running_for(moment: datetime | None) -> str:
    """How long a running job has been going: "12m", "1.5h"."""
    if moment is None:
        return "an unknown time"
    return duration(max(0.0, (timezone.now() - moment).total_seconds()))


@register.filter
def history_url(generic_id: str) -> str:
    """The test page of a generic test id; "" for an id no URL can carry (empty, or with a line break)."""
    try:
        return reverse("hud:test", args=[generic_id]) if generic_id else ""
    except NoReverseMatch:
        return ""
