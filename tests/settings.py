"""The production settings module, fed a test environment: PostgreSQL and Redis on this machine.

Only defaults: anything already in the environment wins. Each xdist worker gets its own Redis
database so that rate-limit and cache keys never cross between parallel tests.
"""

import os
from urllib.parse import urlsplit

_worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
os.environ.setdefault("DJANGO_DEBUG", "true")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ootci")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/1")
if "PYTEST_XDIST_WORKER" in os.environ:
    # The workers inherit the environment of the controlling process, which set REDIS_URL above: each worker moves
    # to a database of its own on the same server, so that queues, journals and counters never cross, numbered from
    # REDIS_URL's (the SQLite lane, beside the PostgreSQL lane in scripts/test.sh, starts at 8). A subprocess a test
    # starts (a task worker) inherits both variables and so lands on the same database as its test.
    _redis = urlsplit(os.environ.setdefault("OOTCI_TEST_REDIS_URL", os.environ["REDIS_URL"]))
    _first = int(_redis.path.strip("/") or 1)
    os.environ["REDIS_URL"] = _redis._replace(path=f"/{(_first + _worker) % 16 or 1}").geturl()
os.environ.setdefault("GITHUB_WEBHOOK_SECRET", "test-webhook-secret")
# Tasks run inline when enqueued (after commit); tests that play the worker call tasks directly.
os.environ.setdefault("Q_SYNC", "true")
# Every HUD test sees the figures of its own data, never a cached copy from another test.
os.environ.setdefault("HUD_CACHE_SECONDS", "0")
# No test fetches Buildkite's real key set: the tests that accept Buildkite tokens point this at a fake issuer.
os.environ.setdefault("OIDC_BUILDKITE_JWKS_URL", "http://127.0.0.1:9/buildkite/.well-known/jwks")
# Every test sees the Buildkite pipeline map it made; the test of a map edit taking effect sets its own delay.
os.environ.setdefault("OIDC_IDENTITY_MAP_SECONDS", "0")
# A bulk follow-up task a test runs ends on an empty list; the test of its lingering sets its own wait.
os.environ.setdefault("FOLLOW_UPS_LINGER_SECONDS", "0")

from config.settings import *  # noqa: E402, F403

# django-q logs a line per enqueued task; benchmarks enqueue thousands.
LOGGING["loggers"] = {"django-q": {"level": "WARNING"}}  # noqa: F405

# The end-to-end test starts a real task worker (a qcluster subprocess) on a queue of its own, named here and in the
# test process alike, so that parallel test workers never share a queue.
Q_CLUSTER["name"] = os.environ.get("OOTCI_TEST_QUEUE", Q_CLUSTER["name"])  # noqa: F405

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # The SQLite lane (make test): a test database in a file, as make run has, so that threads (the live server, a
    # dispatch fan-out) wait for each other's locks instead of failing on an in-memory database's table locks.
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / "var" / f"test-sqlite-gw{_worker}.sqlite3")}  # noqa: F405
elif DATABASES["default"]["ENGINE"] == "ootci.postgresql":  # noqa: F405
    # PostgreSQL, but a transactional test's flush deletes rows rather than truncating every table (tests/postgresql).
    DATABASES["default"]["ENGINE"] = "tests.postgresql"  # noqa: F405
VERDICT_WAIT_SECONDS = 0.0  # tests that wait for a verdict say so
