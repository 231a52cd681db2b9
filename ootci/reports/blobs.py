"""The intermediate store: raw bytes kept by key in S3 (boto3, ``s3://bucket/prefix``, ``AWS_ENDPOINT_URL``
honoured) or a directory (``file:///path``).

Shared by both rooms: relay keeps the raw webhook archive (``relay.reliability.archive``, ARCHIVE_URL) and the raw test
reports and job logs that trusted tasks pull or receive before they parse them (TEST_REPORTS_URL, a folder under
``var/`` by default); hud reads the parsed reports' bytes again to copy every case to ClickHouse
(``hud.stores.clickhouse.copy_cases``). Untrusted CI never writes our database, and a parser crash or a deploy loses
nothing because the bytes are kept here first.
"""

import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

import boto3
from botocore.exceptions import ClientError
from django.conf import settings

SAFE_PART = re.compile(r"[^A-Za-z0-9._-]")
CHUNK = 1024 * 1024


class ArchiveError(Exception):
    pass


class Missing(ArchiveError):
    """Nothing is stored under that key (never stored, or deleted by retention): reading again will not help."""


def key_part(text: str) -> str:
    """``text`` as one path segment of a key: ids from headers or reports must not name another path."""
    part = SAFE_PART.sub("_", text).lstrip(".")
    return part or "unknown"


class Blobs:
    """One store: ``put`` bytes (or a binary stream) under a key, ``open`` them again as a stream, ``delete``, and
    ``listing`` with last-modified times (for retention)."""

    def __init__(self, url: str, *, setting: str) -> None:
        parts = urlsplit(url)
        if parts.scheme == "s3" and parts.netloc:
            self.bucket, self.prefix, self.root = parts.netloc, parts.path.strip("/"), None
        elif parts.scheme == "file" and parts.path:
            self.bucket, self.prefix, self.root = None, "", Path(unquote(parts.path))
        else:
            raise ArchiveError(f"{setting} must be s3://bucket/prefix or file:///path, not {url!r}")

    def _s3(self):
        return boto3.client("s3", endpoint_url=settings.AWS_ENDPOINT_URL or None)

    def _name(self, key: str) -> str:
        if any(part in ("", ".", "..") for part in key.split("/")):
            raise ArchiveError(f"Not a key of ours: {key!r}")
        return f"{self.prefix}/{key}" if self.prefix else key

    def url(self, key: str) -> str:
        if self.bucket:
            return f"s3://{self.bucket}/{self._name(key)}"
        return (self.root / self._name(key)).as_uri()

    def put(self, key: str, body: bytes | BinaryIO, *, content_type: str = "application/octet-stream") -> str:
        """Store ``body`` under ``key`` (a stream is copied in chunks, never held whole); returns its URL."""
        name = self._name(key)
        if self.bucket:
            stream = body if hasattr(body, "read") else _BytesStream(body)
            self._s3().upload_fileobj(stream, self.bucket, name, ExtraArgs={"ContentType": content_type})
        else:
            path = self.root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(path.name + ".partial")
            with partial.open("wb") as out:
                if hasattr(body, "read"):
                    shutil.copyfileobj(body, out, CHUNK)
                else:
                    out.write(body)
            partial.replace(path)  # a reader never sees half a file
        return self.url(key)

    def open(self, key: str) -> BinaryIO:
        """The bytes under ``key`` as a stream (close it when done)."""
        name = self._name(key)
        try:
            if self.bucket:
                return self._s3().get_object(Bucket=self.bucket, Key=name)["Body"]
            return (self.root / name).open("rb")
        except FileNotFoundError as e:
            raise Missing(f"Nothing is stored under {key!r}.") from e
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise Missing(f"Nothing is stored under {key!r}.") from e
            raise

    def expired_delete(self, prefix: str, *, cutoff: datetime) -> list[str]:
        """Delete every object under ``prefix`` last modified before ``cutoff`` (a retention clean-up); their keys."""
        old = [key for key, modified in self.listing(prefix) if modified < cutoff]
        for key in old:
            self.delete(key)
        return old

    def delete(self, key: str) -> None:
        name = self._name(key)
        if self.bucket:
            self._s3().delete_object(Bucket=self.bucket, Key=name)
        else:
            (self.root / name).unlink(missing_ok=True)

    def listing(self, prefix: str = "") -> Iterator[tuple[str, datetime]]:
        """(key, last modified) of every object under ``prefix``."""
        if self.bucket:
            start = f"{self.prefix}/{prefix}" if self.prefix else prefix
            pages = self._s3().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=start)
            for page in pages:
                for item in page.get("Contents", []):
                    key = item["Key"][len(self.prefix) + 1 :] if self.prefix else item["Key"]
                    yield key, item["LastModified"]
            return
        base = self.root / prefix if prefix else self.root
        if not base.exists():
            return
        for path in sorted(base.rglob("*")):
            if path.is_file() and not path.name.endswith(".partial"):
                yield path.relative_to(self.root).as_posix(), datetime.fromtimestamp(path.stat().st_mtime, UTC)


class _BytesStream:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self.data) if size is None or size < 0 else self.pos + size
        chunk, self.pos = self.data[self.pos : end], min(end, len(self.data))
        return chunk


def reports_store() -> Blobs:
    """The store of raw test reports and job logs (TEST_REPORTS_URL)."""
    return Blobs(settings.TEST_REPORTS_URL, setting="TEST_REPORTS_URL")
