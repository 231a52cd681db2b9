"""Disabled-test registry benchmark (prints figures): ``import_disabled_tests`` of a 32,000-entry file (most entries
with an empty issue and platform list, as one backend's real skip list; goal < 5 s), a re-import (no change), an
import that changes, removes and adds 1,000 entries each, its dry run, and GET of the served JSON.

    .venv/bin/pytest -p no:xdist -s tests/bench/bench_disabled_tests.py
"""

import io
import json
import os
import statistics
import subprocess
import sys
import time

import pytest
from django.conf import settings
from django.core.management import call_command

from ootci.models import DisabledTest

ENTRIES = int(os.environ.get("BENCH_DISABLED", 32_000))
CHURN = 1_000
GETS = 10


def entries(n: int) -> dict[str, list]:
    """PyTorch-named entries over 400 device classes; every 20th has an issue, every 30th a platform list."""
    return {
        f"test_op_{i:05d}_npu_float32 (__main__.TestSuite{i % 400:03d}PRIVATEUSE1)": [
            f"https://github.com/acme/npu/issues/{i}" if i % 20 == 0 else "",
            ["linux", "rocm"] if i % 30 == 0 else [],
        ]
        for i in range(n)
    }


def command_import(path: str) -> tuple[float, str]:
    """The command as a user runs it, in its own process (Django's start included), on the test database."""
    db = settings.DATABASES["default"]
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env = os.environ | {"DATABASE_URL": url, "DJANGO_DEBUG": "true"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "manage.py", "import_disabled_tests", "acme/npu", path],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - start, done.stdout.splitlines()[-1]


def timed_import(path: str, *args: str) -> tuple[float, str]:
    out = io.StringIO()
    start = time.perf_counter()
    call_command("import_disabled_tests", "acme/npu", path, *args, stdout=out, stderr=io.StringIO())
    return time.perf_counter() - start, out.getvalue().splitlines()[-1]


@pytest.mark.django_db(transaction=True)
def test_import_and_serve_32000_entries(make_backend, client, tmp_path):
    make_backend("acme/npu")
    data = entries(ENTRIES)
    first = tmp_path / "first.json"
    first.write_text(json.dumps(data))
    changed = dict(data)
    names = list(data)
    for name in names[:CHURN]:
        changed[name] = ["https://github.com/acme/npu/issues/1", ["win"]]
    for name in names[CHURN : 2 * CHURN]:
        del changed[name]
    changed |= {f"test_new_{i:04d} (__main__.TestNew)": ["", []] for i in range(CHURN)}
    second = tmp_path / "second.json"
    second.write_text(json.dumps(changed))

    figures = {
        f"import {ENTRIES:,} entries into an empty list": timed_import(str(first)),
        "re-import of the same file (no change)": timed_import(str(first)),
        f"dry run of a file changing, removing and adding {CHURN:,} each": timed_import(str(second), "--dry-run"),
        "import of that file": timed_import(str(second)),
    }
    assert DisabledTest.objects.count() == ENTRIES
    DisabledTest.objects.all().delete()
    figures[f"manage.py import_disabled_tests of {ENTRIES:,} entries, own process"] = command_import(str(second))
    assert DisabledTest.objects.count() == ENTRIES

    url = "/oot/acme/npu/disabled-tests.json"
    times, size = [], 0
    for _ in range(GETS):
        start = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - start)
        size = len(response.content)
    assert response.json() == changed
    cached = client.get(url, headers={"If-None-Match": response["ETag"]})
    assert cached.status_code == 304

    print(f"\nload average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    for what, (seconds, summary) in figures.items():
        print(f"{what}: {seconds:.2f} s  ({summary})")
    print(
        f"GET {url} ({ENTRIES:,} entries, {size / 1e6:.1f} MB): "
        f"p50 {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms over {GETS}"
    )
