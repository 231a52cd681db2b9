"""The deployment checks (relay/checks.py): with DEBUG off, stores that lose what the relay answered for are refused,
saying what to fix; gunicorn's entry point refuses to start on them."""

import os
import subprocess
import sys

from django.core import checks

from relay import checks as relay_checks


def ids(found) -> list[str]:
    return [m.id for m in found]


def test_a_folder_store_and_the_embedded_clickhouse_are_refused_in_production(settings):
    settings.DEBUG = False
    settings.REDIS_URL = ""
    settings.TEST_REPORTS_URL = "file:///var/lib/ootci/reports"
    settings.CLICKHOUSE_URL = "chdb:///var/lib/ootci/clickhouse"
    settings.ARCHIVE_URL = ""

    found = relay_checks.stores_survive()

    assert ids(found) == ["relay.E001", "relay.E002", "relay.E003"]
    assert all(m.level == checks.ERROR and m.hint for m in found)
    assert "s3://" in found[0].hint and "ClickHouse server" in found[1].hint


def test_an_object_store_and_a_server_pass_and_debug_checks_nothing(settings):
    settings.DEBUG = False
    settings.REDIS_URL = ""
    settings.TEST_REPORTS_URL = "s3://reports/ootci"
    settings.CLICKHOUSE_URL = "https://ch.example:8443/ootci"
    assert relay_checks.stores_survive() == []
    settings.DEBUG = True
    settings.TEST_REPORTS_URL = "file:///tmp/reports"
    assert relay_checks.stores_survive() == []


def test_redis_that_keeps_nothing_on_disk_is_refused_for_the_journal(settings):
    # The test machine's Redis runs with --save "" and no AOF: exactly what a journal must not be kept in.
    settings.DEBUG = False
    settings.REDIS_URL = "redis://127.0.0.1:6379/0"
    settings.TEST_REPORTS_URL = "s3://reports/ootci"
    settings.CLICKHOUSE_URL = ""

    [found] = relay_checks.stores_survive()

    assert found.id == "relay.E003" and "keeps nothing on disk" in found.msg
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    assert ids(relay_checks.stores_survive()) == ["relay.W001"]


def test_gunicorns_entry_point_refuses_to_start_with_a_folder_store(tmp_path):
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": "x" * 60,
        "DJANGO_ALLOWED_HOSTS": "relay.example",
        "TEST_REPORTS_URL": (tmp_path / "reports").as_uri(),
        "REDIS_URL": "",
    }
    done = subprocess.run([sys.executable, "-c", "import config.wsgi"], env=env, capture_output=True, text=True)

    assert done.returncode != 0
    assert "relay.E001: TEST_REPORTS_URL is a folder on this host" in done.stderr
