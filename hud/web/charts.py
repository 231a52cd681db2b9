"""Server-side SVG charts: a 14-day sparkline and the daily pass-rate line chart. No JS.

Days without runs are drawn as gaps (a grey tick, a broken line), never as 0 %.
"""

from django.conf import settings
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from hud.stores.types import DayRate, MetricsSeries

# Line colours with at least 3:1 contrast against the page (WCAG 1.4.11 for graphics), light and dark.
PALETTE = ["#1f77b4", "#d62728", "#2a8a2a", "#9467bd", "#c2560a", "#0f7f8c", "#8c564b", "#b0448f", "#6b6b6b", "#7a7a00"]
FAIR_MARGIN = 15.0


def band(pass_rate: float | None) -> str:
    """Colour band of a pass rate: good (at or above HUD_PASS_RATE_GOOD), fair (within 15 points of it), poor, none."""
    if pass_rate is None:
        return "none"
    bar = settings.HUD_PASS_RATE_GOOD
    return "good" if pass_rate >= bar else "fair" if pass_rate >= bar - FAIR_MARGIN else "poor"


def day_title(point: DayRate) -> str:
    if not point.total:
        return f"{point.day.isoformat()}: no runs"
    return f"{point.day.isoformat()}: {point.pass_rate}% ({point.successes}/{point.total})"


def sparkline(points: list[DayRate], width: int = 112, height: int = 22) -> SafeString:
    step = width / max(len(points), 1)
    bars = []
    for i, point in enumerate(points):
        x, title = i * step + 1, escape(day_title(point))
        if point.pass_rate is None:
            bars.append(
                f'<rect class="gap" x="{x:.1f}" y="{height - 1}" width="{step - 2:.1f}" height="1">'
                f"<title>{title}</title></rect>"
            )
            continue
        h = max(2.0, (height - 2) * point.pass_rate / 100)
        bars.append(
            f'<rect class="{band(point.pass_rate)}" x="{x:.1f}" y="{height - h:.1f}" width="{step - 2:.1f}" '
            f'height="{h:.1f}"><title>{title}</title></rect>'
        )
    label = escape("; ".join(day_title(p) for p in points if p.total) or "no runs")
    return mark_safe(
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="Daily pass rate, last {len(points)} days: {label}">{"".join(bars)}</svg>'
    )


def line_chart(series: list[MetricsSeries], width: int = 960, height: int = 300) -> SafeString:
    left, right, top, bottom = 40, 12, 10, 26
    plot_w, plot_h = width - left - right, height - top - bottom
    days = series[0].days if series else []
    step = plot_w / max(len(days) - 1, 1)
    parts = []
    for pct in (0, 25, 50, 75, 100):
        y = top + plot_h * (1 - pct / 100)
        parts.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text class="axis" x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{pct}%</text>')
    label_every = max(1, len(days) // 8)
    for i, point in enumerate(days):
        if i % label_every == 0 or i == len(days) - 1:
            x = left + i * step
            label = point.day.strftime("%b %d")
            parts.append(f'<text class="axis" x="{x:.1f}" y="{height - 8}" text-anchor="middle">{label}</text>')
    for s in series:
        colour, path, drawing = backend_colour(s.backend.id), [], False
        for i, point in enumerate(s.days):
            if point.pass_rate is None:
                drawing = False
                continue
            x, y = left + i * step, top + plot_h * (1 - point.pass_rate / 100)
            path.append(f"{'L' if drawing else 'M'}{x:.1f},{y:.1f}")
            drawing = True
            title = escape(f"{s.backend.repo} {day_title(point)}")
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.2" fill="{colour}"><title>{title}</title></circle>')
        if path:
            parts.append(f'<path d="{" ".join(path)}" stroke="{colour}" fill="none" stroke-width="1.6"/>')
    return mark_safe(
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="Daily pass rate per backend; the table below lists every value">{"".join(parts)}</svg>'
    )


def backend_colour(backend_id: int) -> str:
    """A backend's line colour: fixed by its id, so it stays when the backend changes level or others come and go."""
    return PALETTE[backend_id % len(PALETTE)]


def skip_chart(points, width: int = 960, height: int = 220) -> SafeString:
    """Tests skipped per day (``hud.coverage.queries.DayPoint``) as bars: a burn-down that shows whether the skip
    debt grows. Days before the first baseline run are left empty; a day without a run repeats the day before (a
    lighter bar)."""
    left, right, top, bottom = 56, 12, 10, 26
    plot_w, plot_h = width - left - right, height - top - bottom
    most = max((p.skipped or 0 for p in points), default=0) or 1
    step = plot_w / max(len(points), 1)
    parts = []
    for frac in (0, 0.5, 1):
        y = top + plot_h * (1 - frac)
        parts.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(
            f'<text class="axis" x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{round(most * frac):,}</text>'
        )
    label_every = max(1, len(points) // 8)
    for i, point in enumerate(points):
        x = left + i * step
        if i % label_every == 0 or i == len(points) - 1:
            label = point.day.strftime("%b %d")
            parts.append(f'<text class="axis" x="{x:.1f}" y="{height - 8}" text-anchor="start">{label}</text>')
        if point.skipped is None:
            continue
        h = max(1.0, plot_h * point.skipped / most)
        title = escape(f"{point.day.isoformat()}: {point.skipped:,} of {point.collected:,} tests skipped")
        parts.append(
            f'<rect class="{"skip" if point.ran else "skip carried"}" x="{x:.1f}" y="{top + plot_h - h:.1f}" '
            f'width="{max(step - 1, 1):.1f}" height="{h:.1f}"><title>{title}</title></rect>'
        )
    shown = [p for p in points if p.skipped is not None]
    summary = f"from {shown[0].skipped:,} to {shown[-1].skipped:,}" if shown else "no baseline runs"
    return mark_safe(
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="Tests skipped per day over {len(points)} days: {summary}">{"".join(parts)}</svg>'
    )
