"""The callback's body checks (relay.endpoints.callback_body) answer exactly what the schema's DRF serializer would:
the same validated data for every body it accepts, the same one-line detail for every body it refuses."""

from ootci.http.api_errors import validation_detail
from relay.endpoints import callback_body
from relay.endpoints.callback import CallbackApi
from relay.endpoints.callback_body import callback_body_checked
from tests.fakes.oidc import reporter_body
from tests.relay.conftest import mutated

FIELDS = {
    (): [row[0] for row in callback_body.REPORT],
    ("workflow",): [row[0] for row in callback_body.WORKFLOW],
    ("workflow", "test_results"): [row[0] for row in callback_body.TEST_RESULTS],
}

VALUES = [
    ...,
    None,
    "",
    "   ",
    "x",
    "  padded  ",
    "completed",
    "in_progress",
    "failure",
    5,
    0,
    -1,
    5.0,
    5.5,
    1e20,
    "5",
    "5.0",
    " 7 ",
    "1_000",
    "5.00  ",
    "x" * 1001,
    2**31 - 1,
    2**31,
    True,
    False,
    [],
    ["1"],
    ["t", None],
    [None],
    {},
    {"a": 1},
    "j" * 300,
    "nul\x00",
    "lone \ud800",
    {"device": "npu", "device_count": 8},
    {"device": 5},
]
BODIES = ("pull_request.in_progress", "pull_request.completed.failure", "nightly.completed")


def drf(data):
    serializer = CallbackApi.InputSerializer(data=data)
    if serializer.is_valid():
        return "valid", serializer.validated_data
    return "refused", validation_detail(serializer.errors)


def plain(data):
    try:
        return "valid", callback_body_checked(data)
    except ValueError as e:
        return "refused", str(e)


def bodies():
    for name in BODIES:
        body = reporter_body(name)
        body["workflow"].setdefault("test_results", {"passed": 1, "failed": 1, "skipped": 0, "failed_tests": ["t"]})
        body["environment"] = {"device": "npu"}
        yield name, body
        for path, keys in FIELDS.items():
            node = body
            for step in path:
                node = node[step]
            for key in {*node, *keys}:
                for value in VALUES[1:] if key not in node else VALUES:
                    yield f"{name} {'.'.join((*path, key))}={value!r:.30}", mutated(body, path, key, value)
    for value in VALUES[1:]:
        yield f"body={value!r:.30}", value


def test_it_answers_what_the_serializer_answers():
    differ = [(name, plain(body), drf(body)) for name, body in bodies() if plain(body) != drf(body)]

    assert not differ, differ[:5]


def test_it_is_held_to_many_bodies():
    assert sum(1 for _ in bodies()) > 2000
