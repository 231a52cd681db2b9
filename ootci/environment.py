"""Where a job ran: the optional ``environment`` of a callback (DESIGN §4, "Optional callback fields"), filled in by
the test report's ``<properties>`` and, on GitHub Actions, by the runner name and labels of the job API.

RFC-0050 asks L1 backends for verifiable accelerator hardware information. What a backend states here is shown and
counted (the job page, the matrix tooltip, the backend page's filters and hardware share, sick runners, the
readiness evidence), never used for routing or trust. Every value is bounded: a callback whose ``environment`` does
not fit is refused with a ``detail`` saying what to fix (:func:`environment_checked`); a report's properties and the
job API are only trimmed to fit (:func:`environment_trimmed`), as they are read by trusted tasks after the fact.
"""

from __future__ import annotations

import json
from typing import Any

# The known keys, each with its bound: text up to N characters, or an integer range, or a list of short texts.
TEXT_KEYS = {
    "device": 100,
    "driver": 200,
    "sdk": 200,
    "torch_version": 100,
    "os": 200,
    "image_digest": 200,
    "runner": 200,
}
DEVICE_COUNT_MAX = 4096
LABELS_MAX = 50  # runner labels kept
LABEL_CHARS = 100
KEYS = (*TEXT_KEYS, "device_count", "runner_labels")
# Keys other than the known ones are kept (shown on the job page, in the JSON) up to these caps.
EXTRA_KEYS_MAX = 20
EXTRA_KEY_CHARS = 64
EXTRA_VALUE_CHARS = 200
EXTRA_BYTES = 2048
# A job carries hardware information when it names its device or its runner (the backend page's share).
HARDWARE_KEYS = ("device", "runner")
# JUnit <property> names read as environment keys: the key itself, or with one of these prefixes.
PROPERTY_PREFIXES = ("", "ootci.", "ootci_", "environment.")


class EnvironmentProblem(ValueError):
    """An ``environment`` that cannot be kept as sent; ``detail`` says which key and what to fix."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


def environment_checked(value: Any) -> dict[str, Any]:
    """A callback's ``environment`` as stored, or EnvironmentProblem naming the key and the fix. Absent or null is
    ``{}``; empty strings and nulls inside are left out (they state nothing)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise EnvironmentProblem(f"environment must be an object of the keys {', '.join(KEYS)}.")
    kept: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, item in value.items():
        if item is None or item == "":
            continue
        if key in TEXT_KEYS:
            kept[key] = _text(item, key, TEXT_KEYS[key])
        elif key == "device_count":
            if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item <= DEVICE_COUNT_MAX:
                raise EnvironmentProblem(f"environment.device_count must be an integer from 0 to {DEVICE_COUNT_MAX}.")
            kept[key] = item
        elif key == "runner_labels":
            kept[key] = _labels(item)
        else:
            extra[key] = _extra(key, item)
    if len(extra) > EXTRA_KEYS_MAX:
        raise EnvironmentProblem(
            f"environment has {len(extra)} keys besides the known ones; at most {EXTRA_KEYS_MAX} are kept: drop some."
        )
    size = len(json.dumps(extra, ensure_ascii=False).encode())
    if size > EXTRA_BYTES:
        raise EnvironmentProblem(
            f"environment's other keys take {size} bytes as JSON; at most {EXTRA_BYTES} are kept: shorten or drop some."
        )
    return kept | extra


def environment_trimmed(value: dict[str, Any]) -> dict[str, Any]:
    """What can be kept of ``value`` (a report's properties, the job API's runner): known keys only, each cut to its
    bound; what does not fit a key's type is dropped."""
    kept: dict[str, Any] = {}
    for key, item in value.items():
        if key in TEXT_KEYS and isinstance(item, str | int | float) and not isinstance(item, bool):
            text = _clean(str(item)).strip()[: TEXT_KEYS[key]]
            if text:
                kept[key] = text
        elif key == "device_count":
            try:
                count = int(str(item).strip())
            except ValueError:
                continue
            if 0 <= count <= DEVICE_COUNT_MAX:
                kept[key] = count
        elif key == "runner_labels":
            items = item if isinstance(item, list) else str(item).split(",")
            labels = [_clean(str(label)).strip()[:LABEL_CHARS] for label in items][:LABELS_MAX]
            if labels := [label for label in labels if label]:
                kept[key] = labels
    return kept


def environment_from_properties(properties: dict[str, str]) -> dict[str, Any]:
    """The environment a JUnit report's ``<properties>`` state (``device``, ``ootci.device``, …), trimmed to fit."""
    found: dict[str, Any] = {}
    for name, value in properties.items():
        lowered = name.strip().lower()
        for prefix in PROPERTY_PREFIXES:
            if lowered.startswith(prefix) and lowered[len(prefix) :] in KEYS:
                found.setdefault(lowered[len(prefix) :], value)
                break
    return environment_trimmed(found)


def environment_filled(recorded: dict[str, Any], found: dict[str, Any]) -> dict[str, Any]:
    """``recorded`` with the keys it lacks taken from ``found``: what the callback stated is never overwritten."""
    return {**found, **recorded} if any(key not in recorded for key in found) else recorded


def environment_merged(recorded: dict[str, Any], stated: dict[str, Any]) -> dict[str, Any]:
    """A later callback's ``stated`` environment over the ``recorded`` one (in_progress, then completed)."""
    return {**recorded, **stated} if stated else recorded


def has_hardware(environment: dict[str, Any] | None) -> bool:
    return bool(environment) and any(environment.get(key) for key in HARDWARE_KEYS)


def runner_keys(environment: dict[str, Any] | None) -> list[str]:
    """What a job ran on, as sick runners are counted: ``runner:<name>`` and ``label:<label>`` for each label."""
    if not environment:
        return []
    keys = [f"runner:{environment['runner']}"] if environment.get("runner") else []
    return keys + [f"label:{label}" for label in environment.get("runner_labels") or []]


def _text(item: Any, key: str, limit: int) -> str:
    if not isinstance(item, str):
        raise EnvironmentProblem(f"environment.{key} must be a string of at most {limit} characters.")
    if len(item) > limit:
        raise EnvironmentProblem(f"environment.{key} is {len(item)} characters long; at most {limit} are accepted.")
    return item


def _labels(item: Any) -> list[str]:
    if not isinstance(item, list) or not all(isinstance(label, str) for label in item):
        raise EnvironmentProblem("environment.runner_labels must be a list of strings.")
    if len(item) > LABELS_MAX:
        raise EnvironmentProblem(
            f"environment.runner_labels has {len(item)} labels; at most {LABELS_MAX} are accepted."
        )
    if too_long := next((label for label in item if len(label) > LABEL_CHARS), None):
        raise EnvironmentProblem(
            f"environment.runner_labels holds a label of {len(too_long)} characters; at most {LABEL_CHARS} fit."
        )
    return [label for label in item if label]


def _extra(key: str, item: Any) -> Any:
    if len(key) > EXTRA_KEY_CHARS:
        raise EnvironmentProblem(f"environment has a key of {len(key)} characters; at most {EXTRA_KEY_CHARS} fit.")
    if isinstance(item, str):
        if len(item) > EXTRA_VALUE_CHARS:
            raise EnvironmentProblem(
                f"environment.{key} is {len(item)} characters long; other keys take at most {EXTRA_VALUE_CHARS}."
            )
        return item
    if isinstance(item, bool | int | float):
        return item
    raise EnvironmentProblem(
        f"environment.{key} must be a string, a number or a boolean (keys other than the known ones)."
    )


def _clean(text: str) -> str:
    return text.replace("\x00", "").encode("utf-8", "ignore").decode("utf-8")
