"""Pages with ClickHouse configured: read from it when it answers, from the database with a banner when it fails."""

import socket
import subprocess
import sys

import pytest

from hud.stores import fallback
from hud.stores.clickhouse import connection as clickhouse
from hud.stores.clickhouse import copy_jobs
from tests.hud import scenario
from tests.hud.builders import job

pytestmark = pytest.mark.django_db

BANNER = "Analytics store unavailable — showing figures from PostgreSQL."
PAGES = ["/oot/", "/oot/acme/npu/", "/oot/metrics/"]  # the pages of figures (the PR and job pages: below)


@pytest.fixture
def unreachable(settings) -> str:
    """A ClickHouse URL at a local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://default:secret@127.0.0.1:{port}/ootci"


@pytest.fixture
def chdb_url(tmp_path) -> str:
    return f"chdb://{tmp_path / 'clickhouse'}"


def test_pages_show_database_figures_and_say_so_when_clickhouse_is_unreachable(client, settings, unreachable):
    s = scenario.build()
    settings.CLICKHOUSE_URL = unreachable

    for url in PAGES:
        response = client.get(url)
        assert response.status_code == 200, url
        assert BANNER in response.content.decode(), url
    for url in ["/oot/pr/101/", f"/oot/acme/npu/jobs/{s.rerun.id}/"]:  # read by key, from the database alone
        response = client.get(url)
        assert response.status_code == 200, url
        assert BANNER not in response.content.decode(), url
    overview = client.get("/oot/").content.decode()
    assert "33.3" in overview  # the hand-counted pass rate, from PostgreSQL
    assert "secret" not in overview
    # Anonymous visitors get a generic line; the driver's error (hosts, ports, SQL) is for staff and the logs.
    assert "the details are in the server&#x27;s log" in overview and "127.0.0.1" not in overview
    assert client.get("/api/oot/").json()["sections"]["L2"][0]["stats"]["counts"]["pass_rate"] == 33.3


def test_the_pr_and_job_pages_show_a_job_not_yet_replicated(client, settings, chdb_url, make_backend):
    scenario.build()
    settings.CLICKHOUSE_URL = chdb_url
    copy_jobs.replicate()
    xpu = make_backend("intel/xpu", "L2", device="xpu")  # its first report, after the last replication
    late = job(xpu, name="late", event_type="pull_request", pr_number=101, head_sha=scenario.A, conclusion="failure")

    page = client.get("/oot/pr/101/").content.decode()
    job_page = client.get(f"/oot/intel/xpu/jobs/{late.pk}/")

    assert "intel/xpu" in page and f"/oot/intel/xpu/jobs/{late.pk}/" in page and "ci / late" in page
    assert "Fix index_put" in page  # and the jobs replicated before
    assert job_page.status_code == 200 and "ci / late" in job_page.content.decode()


def test_staff_see_why_clickhouse_failed(admin_client, settings, unreachable):
    scenario.build()
    settings.CLICKHOUSE_URL = unreachable

    page = admin_client.get("/oot/").content.decode()

    assert BANNER in page and "127.0.0.1" in page and "the details are in the server" not in page


def test_a_chdb_directory_that_cannot_be_opened_falls_back_too(client, settings, tmp_path):
    scenario.build()
    (tmp_path / "not-a-directory").write_text("")
    settings.CLICKHOUSE_URL = f"chdb://{tmp_path / 'not-a-directory'}"

    response = client.get("/oot/acme/npu/")

    assert response.status_code == 200
    assert BANNER in response.content.decode()
    assert "Fix index_put" in response.content.decode()  # the matrix row of PR 101, from PostgreSQL


def test_pages_read_clickhouse_when_it_answers(client, settings, chdb_url):
    s = scenario.build()
    settings.CLICKHOUSE_URL = chdb_url
    copy_jobs.replicate()
    job(s.backend, name="late", event_type="pull_request", pr_number=101, head_sha=scenario.A)  # not copied yet

    pages = {url: client.get(url) for url in PAGES}

    for url, response in pages.items():
        assert response.status_code == 200, url
        assert "Analytics store unavailable" not in response.content.decode(), url
    stats = client.get("/api/oot/acme/npu/").json()["stats"]["counts"]
    assert (stats["successes"], stats["total"]) == (2, 6)  # ClickHouse's figures: the late job is not there yet
    copy_jobs.replicate()
    stats = client.get("/api/oot/acme/npu/").json()["stats"]["counts"]
    assert (stats["successes"], stats["total"]) == (3, 7)


def test_the_chdb_directory_is_free_after_a_page(client, settings, chdb_url, tmp_path):
    scenario.build()
    settings.CLICKHOUSE_URL = chdb_url
    copy_jobs.replicate()

    assert client.get("/oot/").status_code == 200

    # Another process (the replication worker) gets the directory once the page's engine stops lingering
    # (CHDB_LINGER): it waits for it as the worker does (CHDB_BUSY_WAIT), trying again every 0.1 s.
    script = (
        "import clickhouse_connect, sys, time\n"
        "deadline = time.monotonic() + float(sys.argv[2])\n"
        "while True:\n"
        "    try:\n"
        "        c = clickhouse_connect.get_client(interface='chdb', path=sys.argv[1])\n"
        "        break\n"
        "    except Exception:\n"
        "        if time.monotonic() > deadline:\n"
        "            raise\n"
        "        time.sleep(0.1)\n"
        "print(c.query('SELECT count() FROM oot_workflow_job FINAL').result_rows[0][0])\n"
        "c.close()\n"
    )
    path = chdb_url.removeprefix("chdb://")
    wait = str(clickhouse.CHDB_BUSY_WAIT)
    done = subprocess.run([sys.executable, "-c", script, path, wait], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0


@pytest.mark.filterwarnings("ignore::django.core.cache.CacheKeyWarning")  # memcached-only key rules; not used
def test_after_a_failure_the_database_answers_for_a_while_and_nothing_is_cached_across_stores(
    client, settings, unreachable, chdb_url
):
    s = scenario.build()
    settings.HUD_CACHE_SECONDS = 60
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    settings.CLICKHOUSE_URL = chdb_url
    copy_jobs.replicate()
    job(s.backend, name="late", event_type="pull_request", pr_number=101, head_sha=scenario.A)  # PostgreSQL only
    settings.CLICKHOUSE_URL = unreachable

    down = client.get("/oot/").content.decode()
    settings.CLICKHOUSE_URL = chdb_url  # back, but this process waits before trying it again
    still_down = client.get("/oot/").content.decode()
    fallback._outage.update(until=0.0)  # the wait is over
    back = client.get("/oot/").content.decode()

    assert BANNER in down and "42.9" in down  # 3 of 7 from PostgreSQL
    assert BANNER in still_down and "42.9" in still_down
    assert BANNER not in back and "33.3" in back  # 2 of 6 from ClickHouse, not PostgreSQL's cached figures
