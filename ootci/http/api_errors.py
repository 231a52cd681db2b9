"""Error text shared by the JSON endpoints (relay callback, HUD ingest): every refusal is one readable ``detail``."""

from typing import Any

from rest_framework import serializers


class RefusalSerializer(serializers.Serializer):
    """The body of every refusal, as the OpenAPI schema shows it."""

    detail = serializers.CharField(help_text="What is wrong with the request, in one line.")


def validation_detail(errors: Any, path: str = "") -> str:
    """DRF's nested validation errors as one line, each prefixed by its field path.

    ``{"workflow": {"status": ['"x" is not a valid choice.']}}`` → ``workflow.status: "x" is not a valid choice.``
    """
    if isinstance(errors, dict):
        return "; ".join(
            validation_detail(value, path if key == "non_field_errors" else f"{path}.{key}" if path else key)
            for key, value in errors.items()
        )
    if isinstance(errors, list):
        if all(isinstance(e, str) for e in errors):
            text = " ".join(errors)
            return f"{path}: {text}" if path else text
        return "; ".join(validation_detail(e, f"{path}[{i}]") for i, e in enumerate(errors) if e)
    return f"{path}: {errors}" if path else str(errors)
