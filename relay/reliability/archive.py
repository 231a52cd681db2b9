"""The raw webhook archive (ARCHIVE_URL; keys ``<prefix>/YYYY/MM/DD/<delivery id>.json`` so that a day's deliveries
list together), in the intermediate store of ``ootci.reports.blobs``, which also keeps the raw test reports and job logs
(``reports_store()``, TEST_REPORTS_URL).
"""

from datetime import datetime

from django.conf import settings

from ootci.reports.blobs import CHUNK, ArchiveError, Blobs, key_part, reports_store

__all__ = [
    "CHUNK",
    "ArchiveError",
    "Blobs",
    "archive_key",
    "archive_put",
    "key_part",
    "reports_store",
    "webhook_archive",
]


def webhook_archive() -> Blobs:
    return Blobs(settings.ARCHIVE_URL, setting="ARCHIVE_URL")


def archive_key(*, received_at: datetime, delivery_id: str) -> str:
    return f"{received_at.strftime('%Y/%m/%d')}/{key_part(delivery_id)}.json"


def archive_put(*, received_at: datetime, delivery_id: str, body: bytes) -> str:
    """Store a webhook's raw body in ARCHIVE_URL; returns its URL."""
    key = archive_key(received_at=received_at, delivery_id=delivery_id)
    return webhook_archive().put(key, body, content_type="application/json")
