"""The production settings for the benchmarks that start gunicorn and qcluster: one host, a throwaway Redis.

The deployment checks that refuse a folder as the intermediate store (relay.E001) and a Redis without persistence
for the journal (relay.E003) guard a real deployment's data; a benchmark keeps nothing.
"""

from config.settings import *  # noqa: F403

SILENCED_SYSTEM_CHECKS = ["relay.E001", "relay.E003"]
