"""The HUD with its stores failing, real parts only: a Redis the test starts then stops or pauses (SIGSTOP), and a
PostgreSQL that is not there (the database settings pointed at a closed port)."""

import os
import shutil
import signal
import socket
import subprocess
import time

import pytest
import redis
from django.db import connections
from django_q.conf import Conf
from django_q.signing import SignedPackage

from ootci.broker import RedisBroker
from ootci.models import DeferredTask
from tests.hud import scenario


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def own_redis(tmp_path):
    """A redis-server of this test's own on a free port; yields its URL and process (to stop or pause)."""
    port = free_port()
    process = subprocess.Popen(
        [shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", tmp_path],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port, socket_timeout=1)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0", process
    os.kill(process.pid, signal.SIGCONT)
    process.terminate()
    process.wait(timeout=10)


def use_cache(settings, url: str) -> None:
    settings.HUD_CACHE_SECONDS = 180
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": url,
            "OPTIONS": settings.CACHES["default"].get("OPTIONS", {}),
        }
    }


@pytest.mark.django_db
def test_pages_and_api_compute_their_figures_when_redis_is_down(client, settings):
    scenario.build()
    use_cache(settings, f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there

    page, api = client.get("/oot/"), client.get("/api/oot/")

    assert page.status_code == 200
    assert "33.3%" in page.content.decode()
    assert api.status_code == 200


@pytest.mark.django_db
def test_pages_compute_their_figures_when_redis_hangs(client, settings, own_redis):
    url, process = own_redis
    scenario.build()
    use_cache(settings, url)
    assert "33.3%" in client.get("/oot/").content.decode()  # cached while Redis answers
    os.kill(process.pid, signal.SIGSTOP)

    page = client.get("/oot/acme/npu/")

    assert page.status_code == 200
    assert "33.3%" in page.content.decode()


def test_the_task_broker_gives_up_on_a_hanging_redis_instead_of_waiting(own_redis, monkeypatch, db, settings):
    url, process = own_redis
    monkeypatch.setattr(Conf, "REDIS", url)  # django-q2's configuration, read when a broker connects
    broker = RedisBroker(list_key="faults")
    task = SignedPackage.dumps({"id": "t1", "func": "ootci.tasks.readiness_review", "args": (), "kwargs": {}})
    broker.enqueue(task)
    assert broker.dequeue() == [(None, task.encode())]
    assert broker.dequeue() is None  # an idle queue is not a timeout
    os.kill(process.pid, signal.SIGSTOP)

    started = time.monotonic()
    assert broker.enqueue(task) == "t1"
    assert time.monotonic() - started < settings.REDIS_TIMEOUT_SECONDS + 1
    kept = [("ootci.tasks.readiness_review", broker.list_key)]
    assert list(DeferredTask.objects.values_list("func", "queue")) == kept


@pytest.fixture
def database_down(django_db_blocker):
    """Every new connection of the default database goes to a closed port, as when PostgreSQL is down."""
    with django_db_blocker.unblock():
        connection = connections["default"]
        port = connection.settings_dict["PORT"]
        connection.close()
        connection.settings_dict["PORT"] = str(free_port())
        try:
            yield
        finally:
            connection.close()
            connection.settings_dict["PORT"] = port


@pytest.mark.parametrize("url", ["/oot/", "/oot/acme/npu/", "/oot/pr/101/", "/oot/metrics/"])
def test_a_page_answers_503_with_retry_after_when_postgresql_is_down(client, database_down, url):
    client.raise_request_exception = False

    response = client.get(url)

    assert response.status_code == 503
    assert response["Retry-After"] == "30"
    assert response["Content-Type"].startswith("text/html")
    assert "The database is unavailable" in response.content.decode()


@pytest.mark.parametrize("url", ["/api/oot/", "/api/oot/acme/npu/", "/api/oot/pr/101/"])
def test_the_api_answers_503_with_a_json_detail_when_postgresql_is_down(client, database_down, url):
    client.raise_request_exception = False

    response = client.get(url)

    assert response.status_code == 503
    assert response["Retry-After"] == "30"
    assert response.json() == {"detail": "The database is unavailable; retry in 30 seconds."}
