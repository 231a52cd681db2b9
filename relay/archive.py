"""Raw webhook archive: S3 (boto3, ``s3://bucket/prefix``) or a directory (``file:///path``), from ARCHIVE_URL.

Keys read ``<prefix>/YYYY/MM/DD/<delivery id>.json`` so that a day's deliveries list together.
"""

import re
from datetime import datetime
from pathlib import Path
from urllib.parse import unquote, urlsplit

import boto3
from django.conf import settings

SAFE_ID = re.compile(r"[^A-Za-z0-9._-]")


class ArchiveError(Exception):
    pass


def archive_key(*, received_at: datetime, delivery_id: str, prefix: str = "") -> str:
    # The delivery id comes from a header: keep it from naming another path.
    name = SAFE_ID.sub("_", delivery_id) or "unknown"
    return "/".join(p for p in (prefix.strip("/"), received_at.strftime("%Y/%m/%d"), f"{name}.json") if p)


def archive_put(*, received_at: datetime, delivery_id: str, body: bytes) -> str:
    """Store ``body`` under its key in ARCHIVE_URL; returns the key as a URL."""
    url = urlsplit(settings.ARCHIVE_URL)
    if url.scheme == "s3":
        key = archive_key(received_at=received_at, delivery_id=delivery_id, prefix=url.path)
        client = boto3.client("s3", endpoint_url=settings.AWS_ENDPOINT_URL or None)
        client.put_object(Bucket=url.netloc, Key=key, Body=body, ContentType="application/json")
        return f"s3://{url.netloc}/{key}"
    if url.scheme == "file":
        key = archive_key(received_at=received_at, delivery_id=delivery_id)
        path = Path(unquote(url.path)) / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        return path.as_uri()
    raise ArchiveError(f"ARCHIVE_URL must be s3://bucket/prefix or file:///path, not {settings.ARCHIVE_URL!r}")
