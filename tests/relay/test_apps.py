"""The task worker's process: django-q2 forks its workers from ``manage.py qcluster`` and replaces each after
Q_CLUSTER["recycle"] tasks, so what that process imported is every fresh worker's at no cost."""

import json
import os
import subprocess
import sys

SETUP_THEN_LOCATE = """
import json, pydoc, sys
import django
django.setup()
before = set(sys.modules)
found = [pydoc.locate(name) is not None for name in ("relay.tasks.job_completed", "hud.tasks.clickhouse_replicate")]
print(json.dumps({"found": found, "imported_by_first_task": sorted(set(sys.modules) - before)}))
"""


def first_task_imports(command: str) -> dict:
    env = os.environ | {"DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = subprocess.run(
        [sys.executable, "-c", SETUP_THEN_LOCATE, command], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_a_worker_forked_by_qcluster_finds_its_tasks_already_imported():
    assert first_task_imports("qcluster") == {"found": [True, True], "imported_by_first_task": []}


def test_other_commands_do_not_import_the_tasks():
    """The web never runs a task: gunicorn and the other commands start without them (the test above can fail)."""
    imported = first_task_imports("runserver")["imported_by_first_task"]
    assert "relay.tasks" in imported
