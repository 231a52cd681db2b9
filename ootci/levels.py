"""Allowlist levels and the policy each implies (RFC-0050). The one place the table lives."""

from dataclasses import dataclass

from django.db import models


class Level(models.TextChoices):
    L1 = "L1", "L1 · dispatch only"
    L2 = "L2", "L2 · shown on the HUD"
    L3 = "L3", "L3 · PR check run with label"
    L4 = "L4", "L4 · PR check run, blocking"


class PrDisplay(models.TextChoices):
    NEVER = "never"
    LABEL_ONLY = "label_only"
    ALWAYS = "always"


@dataclass(frozen=True)
class Policy:
    forward_event: bool
    display_on_hud: bool
    display_on_pr: PrDisplay
    block_pr: bool


POLICIES: dict[str, Policy] = {
    Level.L1: Policy(forward_event=True, display_on_hud=False, display_on_pr=PrDisplay.NEVER, block_pr=False),
    Level.L2: Policy(forward_event=True, display_on_hud=True, display_on_pr=PrDisplay.NEVER, block_pr=False),
    Level.L3: Policy(forward_event=True, display_on_hud=True, display_on_pr=PrDisplay.LABEL_ONLY, block_pr=False),
    Level.L4: Policy(forward_event=True, display_on_hud=True, display_on_pr=PrDisplay.ALWAYS, block_pr=True),
}

ORDER: list[str] = [level.value for level in Level]
L3_LABEL_PREFIX = "ciflow/oot/"


def policy(level: str) -> Policy:
    return POLICIES[level]


def rank(level: str) -> int:
    return ORDER.index(level)


def promoted(level: str) -> str | None:
    """The next level up, or None at the top."""
    i = rank(level)
    return ORDER[i + 1] if i + 1 < len(ORDER) else None


def demoted(level: str) -> str | None:
    """The next level down, or None at the bottom."""
    i = rank(level)
    return ORDER[i - 1] if i > 0 else None


def l3_label(device: str) -> str:
    return f"{L3_LABEL_PREFIX}{device}"


def shown_on_hud() -> list[str]:
    """The levels whose backends the HUD shows and whose callbacks are accepted (L2 up), highest first."""
    return [level for level in reversed(ORDER) if POLICIES[level].display_on_hud]


def with_check_runs() -> list[str]:
    """The levels whose backends may get check runs on upstream PRs (L3 with its label, L4)."""
    return [level for level in ORDER if POLICIES[level].display_on_pr != PrDisplay.NEVER]


def wants_check_run(level: str, device: str, labels: list[str] | set[str]) -> bool:
    """Whether a backend's jobs get check runs on an upstream PR carrying ``labels``."""
    shown = policy(level).display_on_pr
    if shown == PrDisplay.ALWAYS:
        return True
    if shown == PrDisplay.LABEL_ONLY:
        return bool(device) and l3_label(device) in labels
    return False
