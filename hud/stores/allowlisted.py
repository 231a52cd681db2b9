"""The backends the HUD shows and names, as BackendInfo: read from the allowlist (``ootci.models.Backend``)."""

from hud.stores.types import BackendInfo
from ootci import levels
from ootci.models import Backend


def backends() -> list[BackendInfo]:
    """Enabled allowlisted backends, by repo name."""
    return [
        BackendInfo(b.id, b.repo, b.level, b.device, tuple(b.oncalls), tuple(b.events), b.enabled)
        for b in Backend.objects.filter(enabled=True).order_by("repo")
    ]


def backend(repo: str) -> BackendInfo | None:
    """The enabled backend named ``repo`` (ignoring case), or None."""
    repo = repo.lower()
    return next((b for b in backends() if b.repo.lower() == repo), None)


def shown() -> list[BackendInfo]:
    """The backends the HUD shows (L2 up): highest level first, then by repo."""
    order = levels.shown_on_hud()
    shown = [b for b in backends() if b.level in order]
    return sorted(shown, key=lambda b: (order.index(b.level), b.repo.lower()))
