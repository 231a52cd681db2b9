import contextlib
import functools
import os
import uuid

import pytest
import redis
from django.conf import settings as django_settings
from django.db.migrations.loader import MigrationLoader
from django.db.models.signals import post_migrate
from django.dispatch import receiver
from django.test import override_settings

from hud.stores import fallback
from hud.stores.clickhouse import connection as clickhouse
from ootci.models import Backend
from relay.endpoints import ratelimit
from relay.reports import follow_up_queue
from tests.fakes.buildkite import ISSUER as BUILDKITE_ISSUER
from tests.fakes.buildkite import FakeBuildkite
from tests.fakes.oidc import AUDIENCE, Downstream, FakeOidcIssuer


@functools.cache
def _migrated_schedules() -> list[dict]:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    nodes = {node for leaf in loader.graph.leaf_nodes() for node in loader.graph.forwards_plan(leaf)}
    operations = [op for node in nodes for op in loader.graph.nodes[node].operations]
    return [op.schedule for op in operations if hasattr(op, "schedule")]


@receiver(post_migrate)
def _schedules_back(sender, **kwargs):
    """A transactional test's flush empties every table, then sends post_migrate: the schedules the migrations install
    are put back, so a test finds the database ``migrate`` leaves whichever tests its worker ran before."""
    if sender.label != "django_q":
        return
    from django_q.models import Schedule

    for installs in _migrated_schedules():
        fields = {"func": installs["func"], "minutes": installs["minutes"], "schedule_type": "I", "repeats": -1}
        Schedule.objects.update_or_create(name=installs["name"], defaults=fields)


@pytest.fixture(autouse=True, scope="session")
def _cache_keys_of_this_process():
    """Cache keys made of row ids (the alerts' pending marks, a run's served jobs) are this session's own: the
    session before used the same Redis database (tests/settings.py) and numbered its rows alike."""
    default = {**django_settings.CACHES["default"], "KEY_PREFIX": uuid.uuid4().hex[:12]}
    with override_settings(CACHES={**django_settings.CACHES, "default": default}):
        yield


@pytest.fixture(autouse=True)
def _no_engine_left_open():
    """A HUD request on chdb leaves its engine open a moment (clickhouse.CHDB_LINGER); no test leaves it to the next,
    whose directory is another (chdb runs one per process)."""
    yield
    clickhouse.release()


@pytest.fixture(autouse=True)
def _no_rate_budget_left_over():
    """Rate-limit counts live a minute in Redis: one test's requests (a fuzz run's, hundreds) never spend the budget of
    the test after it (the rejections it may record, the requests it may make)."""
    yield
    try:
        client = redis.Redis.from_url(os.environ["REDIS_URL"])
        if keys := list(client.scan_iter(f"{ratelimit.PREFIX}:*", count=1000)):
            client.delete(*keys)
    except (KeyError, redis.RedisError):
        pass  # no test Redis: nothing counted there


@pytest.fixture(autouse=True)
def _no_follow_ups_left_over():
    """The successes' bulk follow-up list, its pending mark and its lock live in Redis (relay.reports.follow_up_queue):
    a test that queued without running its tasks, or an earlier session's rows of the same ids, never hold the next
    test's follow-ups back."""
    with contextlib.suppress(KeyError, redis.RedisError):  # no test Redis: the follow-ups are tasks of their own
        redis.Redis.from_url(os.environ["REDIS_URL"]).delete(*follow_up_queue.keys())
    yield


@pytest.fixture(autouse=True)
def _no_outage_left_over():
    """A failed ClickHouse read makes this process read the database for a while
    (``fallback.RETRY_CLICKHOUSE_SECONDS``); every test starts afresh, whichever test of the same worker failed one."""
    yield
    fallback._outage.update(until=0.0, reason="")


@pytest.fixture
def make_backend(db):
    def make(repo: str = "ascend/pytorch-npu", level: str = "L2", **fields) -> Backend:
        fields.setdefault("device", "npu" if level == "L3" else "")
        return Backend.objects.create(repo=repo, level=level, **fields)

    return make


@pytest.fixture
def oidc_issuer(settings):
    """A fake OIDC issuer (real HTTP JWKS endpoint) that the settings trust for callbacks."""
    issuer = FakeOidcIssuer().start()
    settings.OIDC_ISSUER = issuer.issuer
    settings.OIDC_JWKS_URL = issuer.jwks_url
    settings.OIDC_AUDIENCE = AUDIENCE
    yield issuer
    issuer.stop()


@pytest.fixture
def buildkite(settings, oidc_issuer):
    """A fake Buildkite (its OIDC issuer's key set and agent API, real HTTP) beside the fake GitHub Actions issuer;
    the settings trust it as Buildkite, its tokens naming the real issuer, https://agent.buildkite.com."""
    fake = FakeBuildkite().start()
    settings.OIDC_BUILDKITE_ISSUER = BUILDKITE_ISSUER
    settings.OIDC_BUILDKITE_JWKS_URL = fake.jwks_url
    yield fake
    fake.stop()


@pytest.fixture
def downstream(live_server, oidc_issuer, make_backend):
    """Make an allowlisted backend (L2 unless told) and its CI, which posts callbacks to the live server.

    Each gets a repo name of its own: rate-limit counters live in a Redis that parallel workers share.
    """

    def make(level: str = "L2", **fields) -> Downstream:
        repo = fields.pop("repo", None) or f"org-{uuid.uuid4().hex[:10]}/pytorch-npu"
        return Downstream(live_server.url, oidc_issuer, make_backend(repo=repo, level=level, **fields))

    return make


@pytest.fixture
def failure_rules(db):
    """The default failure rules. ``migrate`` installs them, but a transactional test's flush empties the table."""
    from ootci.failures.rules import DEFAULT_RULES, rules_import
    from ootci.models import FailureRule

    if not FailureRule.objects.exists():
        rules_import(DEFAULT_RULES.read_text())
