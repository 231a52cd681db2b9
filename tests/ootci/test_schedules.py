"""The django-q2 schedules the migrations install name tasks that exist."""

import pytest
from django.utils.module_loading import import_string
from django_q.models import Schedule

from tests.schedules import schedules_installed

pytestmark = pytest.mark.django_db


def test_every_schedule_names_a_task_that_exists():
    schedules_installed()
    schedules = list(Schedule.objects.values_list("name", "func"))
    assert schedules, "the migrations install the relay's and the HUD's schedules"
    for name, func in schedules:
        assert callable(import_string(func)), f"schedule {name!r} names {func}, which is not callable"
        assert func.split(".")[1] == "tasks", f"schedule {name!r} should call a task module, not {func}"
