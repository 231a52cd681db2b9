"""A callback's body checked field by field with DRF's rules and words, without building a serializer per request.

``CallbackApi.InputSerializer`` is the body as the OpenAPI schema shows it. Validating with it cost every callback a
deep copy of its fields (DRF copies a serializer's declared fields for each instance) and a fifth of the endpoint's
CPU; :func:`callback_body_checked` reads the same fields with the same coercions (numbers as text, ``"5"`` and ``5.0``
as integers, text trimmed) and refuses what it refuses with the same messages, in the same order, so an answer never
tells which one ran (``tests/relay/endpoints/test_callback_body.py`` holds them to that).
"""

import re
from collections.abc import Callable, Mapping
from typing import Any

from ootci import environment
from ootci.http.api_errors import validation_detail
from ootci.models import JobResult
from relay.endpoints import checked

# The conclusions GitHub accepts for a check run.
CONCLUSIONS = ["success", "failure", "cancelled", "timed_out", "skipped", "neutral", "action_required", "stale"]
STATUSES = [s.value for s in JobResult.Status]
MAX_COUNT = checked.INTEGER_RANGES["PositiveIntegerField"][1]  # relay.endpoints.requests.MAX_COUNT
REQUIRED, NULL, BLANK = "This field is required.", "This field may not be null.", "This field may not be blank."
INTEGER_TEXT_MAX = 1000  # DRF's guard against huge numerals
DECIMAL_ZEROS = re.compile(r"\.0*\s*$")
MISSING = object()


class Invalid(Exception):
    """What DRF's ``serializer.errors`` would hold: a list of messages, or field name → errors."""

    def __init__(self, errors: Any):
        super().__init__(errors)
        self.errors = errors


def callback_body_checked(data: Any) -> dict[str, Any]:
    """The body's validated data, as ``InputSerializer(data=data).validated_data``; ValueError with the one-line
    ``detail`` of ``validation_detail(serializer.errors)`` when it is refused."""
    try:
        return _report(data)
    except Invalid as e:
        errors = e.errors
        if errors == [NULL]:  # DRF's wording for a body that is null
            errors = {"non_field_errors": ["No data provided"]}
        raise ValueError(validation_detail(errors)) from None


def _text(max_length: int | None = None, *, blank: bool = False) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value == "" or (isinstance(value, str) and not value.strip()):
            if not blank:
                raise Invalid([BLANK])
            return ""
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise Invalid(["Not a valid string."])
        text = str(value).strip()
        problems = []
        if max_length is not None and len(text) > max_length:
            problems.append(f"Ensure this field has no more than {max_length} characters.")
        if "\x00" in text:
            problems.append("Null characters are not allowed.")
        if surrogate := next((c for c in text if 0xD800 <= ord(c) <= 0xDFFF), None):
            problems.append(f"Surrogate characters are not allowed: U+{ord(surrogate):X}.")
        if problems:
            raise Invalid(problems)
        return text

    return check


def _integer(low: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, str) and len(value) > INTEGER_TEXT_MAX:
            raise Invalid(["String value too large."])
        try:
            number = int(DECIMAL_ZEROS.sub("", str(value)))  # DRF reads "1.0" and 1.0 as 1
        except (TypeError, ValueError):
            raise Invalid(["A valid integer is required."]) from None
        if number < low:
            raise Invalid([f"Ensure this value is greater than or equal to {low}."])
        if number > MAX_COUNT:
            raise Invalid([f"Ensure this value is less than or equal to {MAX_COUNT}."])
        return number

    return check


def _choice(choices: list[str], *, blank: bool = False) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value == "" and blank:
            return ""
        if str(value) not in choices:
            raise Invalid([f'"{value}" is not a valid choice.'])
        return str(value)

    return check


def _json_list(value: Any) -> list:
    if isinstance(value, (str, Mapping)) or not hasattr(value, "__iter__"):
        raise Invalid([f'Expected a list of items but got type "{type(value).__name__}".'])
    if errors := {i: [NULL] for i, item in enumerate(value) if item is None}:
        raise Invalid(errors)
    return list(value)


def _fields(data: Any, fields: list[tuple]) -> dict[str, Any]:
    """DRF's Serializer.to_internal_value over (name, check, required, allow_null, default) rows: every field's
    errors, in their order; a field left out is left out of the result, unless it has a default."""
    if not isinstance(data, Mapping):
        raise Invalid({"non_field_errors": [f"Invalid data. Expected a dictionary, but got {type(data).__name__}."]})
    ret, errors = {}, {}
    for name, check, required, null, default in fields:
        value = data.get(name, MISSING)
        try:
            if value is MISSING:
                if required:
                    raise Invalid([REQUIRED])
                if default is not MISSING:
                    ret[name] = default
            elif value is None:
                if not null:
                    raise Invalid([NULL])
                ret[name] = None
            else:
                ret[name] = check(value)
        except Invalid as e:
            errors[name] = e.errors
    if errors:
        raise Invalid(errors)
    return ret


def _test_results(value: Any) -> dict[str, Any]:
    return _fields(value, TEST_RESULTS)


def _workflow(value: Any) -> dict[str, Any]:
    attrs = _fields(value, WORKFLOW)
    if attrs["status"] == JobResult.Status.COMPLETED and not attrs.get("conclusion"):
        raise Invalid({"conclusion": ["A completed callback needs a conclusion."]})
    return attrs


def _report(data: Any) -> dict[str, Any]:
    if data is None:
        raise Invalid([NULL])
    attrs = _fields(data, REPORT)
    try:
        attrs["environment"] = environment.environment_checked(attrs.get("environment"))
    except environment.EnvironmentProblem as e:
        raise Invalid({"non_field_errors": [e.detail]}) from e
    return attrs


def _any(value: Any) -> Any:
    return value


def _optional(check: Callable) -> tuple:
    """required=False, allow_null=True, no default."""
    return (check, False, True, MISSING)


_text_field = _text(blank=True)
TEST_RESULTS = [
    ("passed", *_optional(_integer(0))),
    ("failed", *_optional(_integer(0))),
    ("skipped", *_optional(_integer(0))),
    ("failed_tests", *_optional(_json_list)),
]
WORKFLOW = [
    ("schema_version", *_optional(_text_field)),
    ("status", _choice(STATUSES), True, False, MISSING),
    ("conclusion", *_optional(_choice(CONCLUSIONS, blank=True))),
    ("name", _text(checked.max_length(JobResult, "workflow_name")), True, False, MISSING),
    ("url", *_optional(_text_field)),
    ("run_id", _text(checked.max_length(JobResult, "run_id")), True, False, MISSING),
    ("run_attempt", *_optional(_integer(1))),
    ("job_name", *_optional(_text(checked.max_length(JobResult, "job_name"), blank=True))),
    ("check_run_id", *_optional(_text(checked.max_length(JobResult, "check_run_id"), blank=True))),
    ("started_at", *_optional(_text_field)),
    ("completed_at", *_optional(_text_field)),
    ("test_results", *_optional(_test_results)),
    ("artifact_url", *_optional(_text_field)),
]
REPORT = [
    ("event_type", _text(checked.max_length(JobResult, "event_type"), blank=True), False, False, ""),
    ("delivery_id", _text(checked.max_length(JobResult, "delivery_id")), True, False, MISSING),
    ("callback_token", *_optional(_text_field)),
    ("workflow", _workflow, True, False, MISSING),
    ("environment", *_optional(_any)),
]
