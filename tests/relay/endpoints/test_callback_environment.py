"""The callback's optional ``environment``: kept on the job, merged across reports, never a conflict, refused with a
``detail`` that says what to fix when it does not fit."""

import pytest

from ootci.models import JobResult

ENVIRONMENT = {
    "device": "Ascend910B",
    "device_count": 8,
    "driver": "24.1.rc2",
    "sdk": "CANN 8.0.RC3",
    "torch_version": "2.6.0a0+git1234",
    "os": "Ubuntu 22.04",
    "image_digest": "sha256:" + "a" * 64,
    "runner": "npu-07",
    "runner_labels": ["self-hosted", "npu", "arm64"],
}


def test_it_keeps_the_environment_beside_the_workflow(downstream):
    ci = downstream()
    dispatch = ci.dispatch()
    body = ci.body("pull_request.in_progress", dispatch) | {"environment": ENVIRONMENT | {"cluster": "hz-2"}}

    response = ci.post(body)

    assert response.status_code == 200, response.text
    assert JobResult.objects.get().environment == ENVIRONMENT | {"cluster": "hz-2"}


def test_a_completed_report_adds_to_the_environment_without_a_conflict(downstream):
    ci = downstream()
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.in_progress", dispatch) | {"environment": {"runner": "npu-07"}}).ok
    completed = ci.body("pull_request.completed.failure", dispatch) | {"environment": {"device": "Ascend910B"}}

    response = ci.post(completed)
    repeat = ci.post(completed)

    assert response.status_code == 200, response.text
    assert JobResult.objects.get().environment == {"runner": "npu-07", "device": "Ascend910B"}
    assert repeat.json()["duplicate"] is True


def test_a_report_without_an_environment_leaves_the_recorded_one(downstream):
    ci = downstream()
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.in_progress", dispatch) | {"environment": {"runner": "npu-07"}}).ok

    assert ci.post(ci.body("pull_request.completed.failure", dispatch)).ok

    assert JobResult.objects.get().environment == {"runner": "npu-07"}


@pytest.mark.parametrize(
    ("environment", "detail"),
    [
        ("npu", "environment must be an object"),
        ({"device": 910}, "environment.device must be a string"),
        ({"device_count": "8"}, "environment.device_count must be an integer from 0 to 4096"),
        ({"device_count": True}, "environment.device_count must be an integer"),
        ({"runner": "r" * 201}, "environment.runner is 201 characters long; at most 200 are accepted"),
        ({"runner_labels": "npu"}, "environment.runner_labels must be a list of strings"),
        ({"runner_labels": ["x"] * 51}, "environment.runner_labels has 51 labels; at most 50"),
        ({"rack": {"row": 3}}, "environment.rack must be a string, a number or a boolean"),
        ({f"k{i}": "v" for i in range(21)}, "environment has 21 keys besides the known ones; at most 20"),
        ({f"k{i}": "v" * 200 for i in range(12)}, "at most 2048 are kept: shorten or drop some"),
    ],
)
def test_it_refuses_an_environment_that_does_not_fit_with_what_to_fix(downstream, environment, detail):
    ci = downstream()
    dispatch = ci.dispatch()

    response = ci.post(ci.body("pull_request.in_progress", dispatch) | {"environment": environment})

    assert response.status_code == 400
    assert detail in response.json()["detail"]
    assert not JobResult.objects.exists()


def test_a_null_environment_states_nothing(downstream):
    ci = downstream()
    dispatch = ci.dispatch()

    response = ci.post(ci.body("pull_request.in_progress", dispatch) | {"environment": None})

    assert response.status_code == 200, response.text
    assert JobResult.objects.get().environment == {}
