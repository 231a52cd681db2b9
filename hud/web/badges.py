"""The status badge of a backend (``/oot/<org>/<repo>/badge.svg``): its level and pass rate, as a flat SVG in the
shields.io layout, for a README. Server-side, no fonts loaded: widths come from a fixed per-character estimate."""

from django.utils.html import escape

from hud.web.charts import band

COLOURS = {"good": "#2a8a2a", "fair": "#b07a00", "poor": "#c0392b", "none": "#6b6b6b"}
CHAR_WIDTH = 6.5  # px per character of 11 px Verdana, near enough for a badge


def badge_svg(*, label: str, message: str, pass_rate: float | None, title: str) -> str:
    left, right = _width(label), _width(message)
    total, colour = left + right, COLOURS[band(pass_rate)]
    label, message, title = escape(label), escape(message), escape(title)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total}" height="20" role="img" '
        f'aria-label="{label}: {message}"><title>{title}</title>'
        f'<rect width="{left}" height="20" fill="#555"/><rect x="{left}" width="{right}" height="20" fill="{colour}"/>'
        f'<g fill="#fff" text-anchor="middle" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11">'
        f'<text x="{left / 2:.1f}" y="14">{label}</text><text x="{left + right / 2:.1f}" y="14">{message}</text></g>'
        "</svg>"
    )


def _width(text: str) -> int:
    return int(len(text) * CHAR_WIDTH + 12)
