"""The backends the HUD shows and names, as BackendInfo: read from the allowlist (``ootci.models.Backend``)."""

from hud.stores.types import BackendInfo
from ootci import levels
from ootci.models import Backend


def backends() -> list[BackendInfo]:
    """Enabled allowlisted backends, by repo name (the relay's probes among them: their pages exist)."""
    return [
        BackendInfo(b.id, b.repo, b.level, b.device, tuple(b.oncalls), tuple(b.events), b.enabled, b.probe)
        for b in Backend.objects.filter(enabled=True).order_by("repo")
    ]


def backend(repo: str) -> BackendInfo | None:
    """The enabled backend named ``repo`` (ignoring case), or None."""
    repo = repo.lower()
    return next((b for b in backends() if b.repo.lower() == repo), None)


def shown() -> list[BackendInfo]:
    """The backends whose figures the HUD shows (L2 up, the relay's probes left out): highest level first, then by
    repo."""
    order = levels.shown_on_hud()
    shown = [b for b in backends() if b.level in order and not b.probe]
    return sorted(shown, key=lambda b: (order.index(b.level), b.repo.lower()))


def probes() -> list[BackendInfo]:
    """The relay's probes (``Backend.probe``), by repo: the summary page's relay-health cards."""
    return [b for b in backends() if b.probe]
