"""Untrusted values to checked values, at the edge: what a request carries is refused here (a ``detail`` naming
the field, answered as 400 or 401) before anything is read into a query or written, never at the database.

Used by the webhook, the callback, the CRCR ingest and the OIDC token check. What is refused:

- JSON that is not UTF-8, nested more than ``MAX_DEPTH`` deep, or holding ``NaN``/``Infinity`` or a number too
  large for a float (PostgreSQL's json types take none of them);
- text holding a NUL character (PostgreSQL text and jsonb cannot store it) or a lone surrogate (it has no UTF-8
  form), anywhere in a body, keys included. The one exception is text we only display: paths passed as
  ``display_only`` to :func:`json_document` (a callback's failed-test names and messages) and details recorded
  for the HUD (:func:`display_text`) have those characters stripped instead;
- values that do not fit the column they are stored in (:func:`column_problem`): text longer than the model
  field's ``max_length``, integers outside the field's range on PostgreSQL (a PositiveIntegerField holds
  0..2³¹-1), dates that are not real (2024-02-30, hour 25) or not ISO 8601.
"""

import json
import math
from datetime import UTC
from typing import Any

from django.db import models
from django.db.backends.base.operations import BaseDatabaseOperations
from django.http import HttpRequest
from django.utils.dateparse import parse_datetime

from ootci.models import Delivery, PullRequest

MAX_DEPTH = 64  # GitHub's payloads nest about 8 deep; a callback or ingest body wraps one in 3 more
WEBHOOK_MAX_BYTES = 25 * 1024 * 1024  # the largest payload GitHub sends
INTEGER_RANGES = BaseDatabaseOperations.integer_field_ranges  # PostgreSQL's, which are Django's defaults


class Unchecked(Exception):
    """A value that failed its check; ``detail`` says which field and why, ``status`` is the HTTP answer."""

    def __init__(self, detail: str, status: int = 400):
        super().__init__(detail)
        self.detail = detail
        self.status = status


def request_body(request: HttpRequest, *, max_bytes: int) -> bytes:
    """The raw body, up to ``max_bytes`` (413 beyond). For endpoints whose limit is above Django's
    DATA_UPLOAD_MAX_MEMORY_SIZE, which ``request.body`` enforces for every other endpoint."""
    length = request.META.get("CONTENT_LENGTH") or "0"
    if not (length.isascii() and length.isdigit()):
        raise Unchecked("Content-Length is not a number.")
    if int(length) > max_bytes:
        raise Unchecked(f"The body is {length} bytes; this endpoint takes at most {max_bytes} bytes.", 413)
    return request.read()


def json_document(raw: bytes | str, *, what: str = "The body", display_only: tuple[str, ...] = ()) -> Any:
    """``raw`` parsed, after the checks in the module docstring. Text under a path of ``display_only`` (dotted, list
    items as ``[i]``: ``"workflow.test_results.failed_tests"``) has NUL and lone surrogates stripped, not refused."""
    try:
        document = json.loads(raw, parse_constant=_constant_refuse, parse_float=_finite_float)
    except UnicodeDecodeError:
        raise Unchecked(f"{what} is not valid JSON (not UTF-8 text).") from None
    except ValueError as e:
        raise Unchecked(f"{what} is not valid JSON ({_printable(str(e))}).") from None
    except RecursionError:
        raise Unchecked(f"{what} is JSON nested too deeply (more than {MAX_DEPTH} levels).") from None
    return _checked_tree(document, "", 0, what, display_only)


def text_problem(value: str) -> str | None:
    """What makes ``value`` unstorable text, or None."""
    if "\x00" in value:
        return "holds a NUL character"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "holds a lone surrogate (an unpaired \\ud800-\\udfff)"
    return None


def display_text(value: str) -> str:
    """``value`` without NUL characters and lone surrogates: for text that is only shown, never matched on."""
    value = value.replace("\x00", "")
    return value if text_problem(value) is None else value.encode("utf-8", "ignore").decode("utf-8")


def text(value: Any, *, field: str, max_length: int | None = None) -> str:
    """``value`` as storable text of at most ``max_length`` characters; Unchecked naming ``field`` otherwise."""
    if not isinstance(value, str):
        raise Unchecked(f"{field} must be a string.")
    if problem := text_problem(value):
        raise Unchecked(f"{field} {problem}.")
    if max_length is not None and len(value) > max_length:
        raise Unchecked(f"{field} is {len(value)} characters long; at most {max_length} are accepted.")
    return value


def max_length(model: type[models.Model], name: str) -> int:
    """The ``max_length`` of a model's text column: serializers take their limits from the columns they fill."""
    return model._meta.get_field(name).max_length


def column_problem(model: type[models.Model], name: str, value: Any) -> str | None:
    """Why ``value`` cannot be stored in ``model.name`` (PostgreSQL), or None; None and "" always fit."""
    if value is None or value == "":
        return None
    field = model._meta.get_field(name)
    if isinstance(field, models.DateTimeField):
        return _moment_problem(value)
    if isinstance(field, models.IntegerField):
        low, high = INTEGER_RANGES[field.get_internal_type()]
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be an integer"
        return None if low <= value <= high else f"must be an integer from {low} to {high}"
    if isinstance(value, str):
        if problem := text_problem(value):
            return problem
        if field.max_length is not None and len(value) > field.max_length:
            return f"is {len(value)} characters long; at most {field.max_length} fit"
    return None


def fields_problem(document: dict[str, Any], columns: dict[str, tuple[type[models.Model], str]]) -> str | None:
    """The first value of ``document`` at a dotted path of ``columns`` that does not fit its column, as
    "<path> <why>", or None. A path that is absent, or crosses a value that is not an object, is skipped (the
    caller's shape check reports wrong types)."""
    for path, (model, name) in columns.items():
        node: Any = document
        for step in path.split("."):
            node = node.get(step) if isinstance(node, dict) else None
        if problem := column_problem(model, name, node):
            return f"{path} {problem}"
    return None


def webhook_problem(*, event: str, payload: dict[str, Any], delivery_id: str) -> str | None:
    """Why a signed delivery of ``event`` cannot be stored as it is, or None: the fields the relay writes to a
    column must fit it (the whole payload's text was checked by :func:`json_document`)."""
    if problem := column_problem(Delivery, "delivery_id", delivery_id):
        return f"X-GitHub-Delivery {problem}."
    if problem := fields_problem(payload, WEBHOOK_COLUMNS.get(event, {})):
        return f"The payload's {problem}."
    return None


# The payload fields each routed event stores as they are (the relay cuts free text such as the title to fit).
WEBHOOK_COLUMNS: dict[str, dict[str, tuple[type[models.Model], str]]] = {
    "pull_request": {
        "action": (Delivery, "action"),
        "pull_request.number": (PullRequest, "number"),
        "pull_request.head.sha": (PullRequest, "head_sha"),
        "pull_request.html_url": (PullRequest, "html_url"),
        "pull_request.created_at": (PullRequest, "created_at"),
        "pull_request.updated_at": (PullRequest, "updated_at"),
    },
    "push": {"action": (Delivery, "action")},
    "check_run": {"action": (Delivery, "action")},
    "check_suite": {"action": (Delivery, "action")},
}


def _moment_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return "must be an ISO 8601 date and time"
    try:
        moment = parse_datetime(value)
        if moment is not None and moment.tzinfo is not None:
            moment.astimezone(UTC)  # an offset can push year 1 or 9999 out of range
    except (ValueError, OverflowError):
        moment = None
    if moment is None:
        return f"must be a real ISO 8601 date and time (not {_printable(value[:40])!r})"
    return None


def _checked_tree(value: Any, path: str, depth: int, what: str, display_only: tuple[str, ...]) -> Any:
    """``value`` with every string checked (or, under ``display_only``, cleaned) and its depth bounded."""
    if isinstance(value, str):
        problem = text_problem(value)
        if problem is None:
            return value
        if path.startswith(display_only) and display_only:
            return display_text(value)
        raise Unchecked(f"{_where(what, path)} {problem}.")
    if isinstance(value, dict | list) and depth >= MAX_DEPTH:
        raise Unchecked(f"{what} is JSON nested too deeply (more than {MAX_DEPTH} levels, at {_printable(path)}).")
    if isinstance(value, dict):
        checked = {}
        for key, item in value.items():
            if problem := text_problem(key):
                raise Unchecked(f"{_where(what, path)} has a key that {problem}.")
            checked[key] = _checked_tree(item, f"{path}.{key}" if path else key, depth + 1, what, display_only)
        return checked
    if isinstance(value, list):
        return [_checked_tree(item, f"{path}[{i}]", depth + 1, what, display_only) for i, item in enumerate(value)]
    return value


def _where(what: str, path: str) -> str:
    # Keys are the sender's text: shown escaped, so a detail never carries what it refuses.
    return f"{what}'s {_printable(path)}" if path else what


def _printable(value: str) -> str:
    return value if text_problem(value) is None and value.isprintable() else value.encode("unicode_escape").decode()


def _constant_refuse(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):
        raise ValueError(f"{literal[:40]} is too large a number")
    return number
