"""Deployment checks (``manage.py check --deploy``, and every production start: ``config.wsgi`` and the task worker
refuse to start on an error): where the relay keeps what it answered 202 for must survive a restart and be seen by
every process of the deployment.

- ``relay.E001``: ``TEST_REPORTS_URL`` is a folder on this host (``file://``). The web and worker processes of a real
  deployment run on different hosts: an upload stored by one is never found by the other, and ends ``failed``.
- ``relay.E002``: ``CLICKHOUSE_URL`` is the embedded engine (``chdb://``), which serves one process.
- ``relay.E003``: the journal (``relay.reliability.journal``) would keep entries where they can be lost: Redis
  without persistence (neither AOF nor RDB snapshots) or with an eviction policy other than ``noeviction``, or, without
  Redis, a folder on one host.
- ``relay.W001``: Redis does not answer, so its settings cannot be read.

With DEBUG on (the embedded defaults of the first set-up command) none applies.
"""

from typing import Any

import redis
from django.conf import settings
from django.core import checks

DOCS = "README, Production"


@checks.register(checks.Tags.security, deploy=True)
def stores_survive(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    if settings.DEBUG:
        return []
    found: list[checks.CheckMessage] = []
    if settings.TEST_REPORTS_URL.startswith("file:"):
        found.append(
            checks.Error(
                f"TEST_REPORTS_URL is a folder on this host ({settings.TEST_REPORTS_URL}): the web and worker "
                "processes of a deployment run on different hosts, so every upload would end 'failed'.",
                hint="Set TEST_REPORTS_URL to an object store: s3://<bucket>/<prefix>.",
                id="relay.E001",
            )
        )
    if settings.CLICKHOUSE_URL.startswith("chdb:"):
        found.append(
            checks.Error(
                "CLICKHOUSE_URL is the embedded engine (chdb://), which serves one process, not a deployment.",
                hint="Use a ClickHouse server: http(s)://user:password@host:8123/database, or leave it empty.",
                id="relay.E002",
            )
        )
    found += _journal_survives()
    return found


def _journal_survives() -> list[checks.CheckMessage]:
    if not settings.REDIS_URL:
        store = settings.ARCHIVE_URL or settings.TEST_REPORTS_URL
        if store.startswith("file:"):
            return [
                checks.Error(
                    f"The journal would be kept in a folder on this host ({store}): journaled requests are lost "
                    "with the host.",
                    hint="Set REDIS_URL (with persistence and noeviction) or ARCHIVE_URL to an object store.",
                    id="relay.E003",
                )
            ]
        return []
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
        config = client.config_get("appendonly") | client.config_get("save") | client.config_get("maxmemory-policy")
    except redis.RedisError as e:
        unchecked = f"Redis at REDIS_URL did not answer ({e}): its persistence is unchecked."
        return [checks.Warning(unchecked, id="relay.W001")]
    problems = []
    if config.get("appendonly") != "yes" and not config.get("save"):
        problems.append("keeps nothing on disk (appendonly no, save '')")
    if config.get("maxmemory-policy", "noeviction") != "noeviction":
        problems.append(f"evicts keys (maxmemory-policy {config['maxmemory-policy']})")
    if not problems:
        return []
    return [
        checks.Error(
            f"The journal is kept in Redis, which {' and '.join(problems)}: a journaled request can be lost.",
            hint="Run Redis with appendonly yes (or RDB snapshots) and maxmemory-policy noeviction.",
            id="relay.E003",
        )
    ]


def refuse_to_start() -> None:
    """Run the deployment checks at a production start; an error stops it with what to fix."""
    if settings.DEBUG:
        return
    silenced = set(settings.SILENCED_SYSTEM_CHECKS)  # as `manage.py check` honours them
    found = checks.run_checks(include_deployment_checks=True)
    errors = [m for m in found if m.level >= checks.ERROR and m.id not in silenced]
    if errors:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured("\n".join(f"{m.id}: {m.msg} {m.hint or ''}".strip() for m in errors))
