"""GET /oot/<org>/<repo>/disabled-tests.json: the backend's list in PyTorch's DISABLED_TESTS_FILE format."""

import io
import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from ootci.models import DisabledTest

pytestmark = pytest.mark.django_db

URL = "/oot/acme/npu/disabled-tests.json"
FILE = {
    "test_add_npu_float32 (__main__.TestBinaryUfuncsPRIVATEUSE1)": ["https://github.com/acme/npu/issues/12", ["linux"]],
    "test_sort (__main__.TestSortAndSelect)": ["", []],
    "test/test_nn.py::TestNN::test_conv": ["", ["rocm", "win"]],
}


@pytest.fixture
def npu(make_backend):
    return make_backend("acme/npu")


def test_an_imported_file_is_served_back_as_it_was(client, npu, tmp_path):
    path = tmp_path / "disabled.json"
    path.write_text(json.dumps(FILE))
    call_command("import_disabled_tests", "acme/npu", str(path), stdout=io.StringIO(), stderr=io.StringIO())

    response = client.get(URL)

    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response.json() == FILE
    assert list(response.json()) == sorted(FILE)


def test_expired_entries_and_other_backends_are_left_out(client, npu, make_backend):
    for name, expires in (("test_a (__main__.T)", -1), ("test_b (__main__.T)", 1), ("test_c (__main__.T)", None)):
        entry = DisabledTest(backend=npu, expires_at=expires and timezone.now() + timedelta(hours=expires))
        entry.name_set(name)
        entry.save()
    other = DisabledTest(backend=make_backend("acme/cuda"))
    other.name_set("test_d (__main__.T)")
    other.save()

    assert client.get(URL).json() == {"test_b (__main__.T)": ["", []], "test_c (__main__.T)": ["", []]}
    assert client.get("/oot/ACME/NPU/disabled-tests.json").status_code == 200


def test_an_unknown_backend_is_a_json_404(client, db):
    response = client.get("/oot/nobody/nothing/disabled-tests.json")

    assert response.status_code == 404
    assert response.json() == {"detail": "nobody/nothing is not an allowlisted backend"}


def test_it_is_cached_60_seconds_and_answered_304_when_unchanged(client, npu):
    first = client.get(URL)
    again = client.get(URL, headers={"If-None-Match": first["ETag"]})
    entry = DisabledTest(backend=npu)
    entry.name_set("test_a (__main__.T)")
    entry.save()
    changed = client.get(URL, headers={"If-None-Match": first["ETag"]})

    assert first.json() == {} and "max-age=60" in first["Cache-Control"]
    assert again.status_code == 304
    assert changed.status_code == 200 and changed.json() == {"test_a (__main__.T)": ["", []]}


def test_it_is_in_the_openapi_schema(client, db):
    schema = client.get("/api/schema/", headers={"Accept": "application/json"}).json()
    assert "/oot/{org}/{repo}/disabled-tests.json" in schema["paths"]
