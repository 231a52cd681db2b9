"""What the JSON API's views share: dataclasses to JSON, a backend named in the path, a backend in an answer."""

import dataclasses
from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import NotFound

from hud.stores import allowlisted
from hud.stores.types import BackendInfo


def plain(value: Any) -> Any:
    """Dataclasses (with their computed properties) to plain JSON-ready data."""
    if dataclasses.is_dataclass(value):
        data = {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        for klass in type(value).__mro__:  # its own properties and those it inherits
            for name, attr in vars(klass).items():
                if isinstance(attr, property) and name not in data:
                    data[name] = plain(getattr(value, name))
        return data
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def backend_or_404(org: str, repo: str) -> BackendInfo:
    found = allowlisted.backend(f"{org}/{repo}")
    if found is None:
        raise NotFound(f"{org}/{repo} is not an allowlisted backend")
    return found


class BackendRefSerializer(serializers.Serializer):
    """A backend as the per-test views name it ."""

    id = serializers.IntegerField()
    repo = serializers.CharField()
    level = serializers.CharField()
    device = serializers.CharField()
