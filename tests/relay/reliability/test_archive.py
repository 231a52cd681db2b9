"""Raw webhook archive: S3 (a moto server over HTTP) or a directory, written by a task after the commit."""

import io
from datetime import UTC, datetime

import boto3
import pytest
from moto.server import ThreadedMotoServer

from ootci.models import Delivery, Dispatch
from relay.reliability import archive
from tests.relay.conftest import fixture_bytes

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def s3(settings, monkeypatch):
    """A moto S3 server on a free port, with credentials that only it accepts."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    settings.AWS_ENDPOINT_URL = f"http://{host}:{port}"
    yield boto3.client("s3", endpoint_url=settings.AWS_ENDPOINT_URL)
    server.stop()


def test_the_raw_body_is_archived_to_s3_by_date_and_delivery_id(s3, settings, post_webhook, make_backend):
    s3.create_bucket(Bucket="webhooks")
    settings.ARCHIVE_URL = "s3://webhooks/raw"
    response = post_webhook("pull_request", "pull_request.opened.payload", delivery_id="abc-123")
    assert response.status_code == 200
    delivery = Delivery.objects.get()
    key = f"raw/{delivery.received_at:%Y/%m/%d}/abc-123.json"
    assert delivery.archive_key == f"s3://webhooks/{key}"
    stored = s3.get_object(Bucket="webhooks", Key=key)["Body"].read()
    assert stored == fixture_bytes("pull_request.opened.payload")  # the exact bytes GitHub signed


def test_an_archive_failure_loses_nothing(s3, settings, post_webhook, make_backend, fake_github):
    settings.ARCHIVE_URL = "s3://no-such-bucket/raw"
    make_backend("org/a")
    response = post_webhook("pull_request", "pull_request.opened.payload", delivery_id="kept")
    assert response.status_code == 202
    delivery = Delivery.objects.get(delivery_id="kept")
    assert delivery.archive_key == ""
    assert Dispatch.objects.get().status == "sent"
    assert len(fake_github.dispatches()) == 1


def test_the_raw_body_is_archived_to_a_directory(tmp_path, settings, post_webhook):
    settings.ARCHIVE_URL = tmp_path.as_uri()
    post_webhook("push", "push.with-new-branch.payload", delivery_id="file-1")
    delivery = Delivery.objects.get()
    path = tmp_path / f"{delivery.received_at:%Y/%m/%d}" / "file-1.json"
    assert path.read_bytes() == fixture_bytes("push.with-new-branch.payload")
    assert delivery.archive_key == path.as_uri()


def test_nothing_is_archived_for_a_rejected_or_ignored_delivery(tmp_path, settings, post_webhook):
    settings.ARCHIVE_URL = tmp_path.as_uri()
    post_webhook("pull_request", "pull_request.opened.payload", signature="sha256=bad")
    post_webhook("ping", "ping.payload")
    assert not any(tmp_path.iterdir())


def test_a_delivery_id_cannot_escape_the_archive():
    key = archive.archive_key(received_at=datetime(2026, 1, 2, tzinfo=UTC), delivery_id="../../etc/passwd")
    assert key == "2026/01/02/_.._etc_passwd.json"
    with pytest.raises(archive.ArchiveError):
        archive.Blobs("file:///tmp/x", setting="TEST_REPORTS_URL").put("a/../../b", b"")


@pytest.mark.parametrize("where", ["s3", "file"])
def test_the_intermediate_store_keeps_streams_and_lists_them_for_retention(where, s3, settings, tmp_path):
    if where == "s3":
        s3.create_bucket(Bucket="reports")
        settings.TEST_REPORTS_URL = "s3://reports/raw"
    else:
        settings.TEST_REPORTS_URL = tmp_path.as_uri()
    store = archive.reports_store()
    big = io.BytesIO(b"x" * (3 * archive.CHUNK + 5))
    url = store.put("npu/123/1/abc.xml", big)
    store.put("npu/124/1/def.zip", b"zip")
    assert url.endswith("npu/123/1/abc.xml")
    with store.open("npu/123/1/abc.xml") as stream:
        assert len(stream.read()) == 3 * archive.CHUNK + 5
    assert [key for key, _ in store.listing("npu/")] == ["npu/123/1/abc.xml", "npu/124/1/def.zip"]
    assert all(modified.tzinfo is not None for _, modified in store.listing())
    store.delete("npu/123/1/abc.xml")
    assert [key for key, _ in store.listing("npu/")] == ["npu/124/1/def.zip"]  # the S3 server is shared by tests


def test_a_store_url_that_is_neither_s3_nor_a_folder_is_refused(settings):
    settings.TEST_REPORTS_URL = "ftp://host/x"
    with pytest.raises(archive.ArchiveError, match="TEST_REPORTS_URL must be s3://bucket/prefix or file:///path"):
        archive.reports_store()
