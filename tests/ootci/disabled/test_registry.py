"""manage.py import_disabled_tests: PyTorch's disabled-tests file validated whole, diffed, applied in one go."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from ootci.disabled import registry
from ootci.models import DisabledTest
from ootci.models.disabled import Kind, name_parse

pytestmark = pytest.mark.django_db

ISSUE = "https://github.com/acme/npu/issues/12"
FILE = {
    "test_add_npu_float32 (__main__.TestBinaryUfuncsPRIVATEUSE1)": [ISSUE, ["linux"]],
    "test_sort (__main__.TestSortAndSelect)": ["", []],
    "test/test_nn.py::TestNN::test_conv": ["", []],
}


@pytest.fixture
def npu(make_backend):
    return make_backend("acme/npu")


def write(tmp_path, data, name="disabled.json") -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def run(*args, stdin: str | None = None) -> str:
    out = io.StringIO()
    extra = {"stdin": io.StringIO(stdin)} if stdin is not None else {}
    call_command("import_disabled_tests", *args, stdout=out, stderr=io.StringIO(), **extra)
    return out.getvalue()


def listed(backend) -> dict:
    return json.loads(registry.export_json(backend_id=backend.pk))


def test_it_tells_pytorch_names_from_generic_ids():
    assert name_parse("test_x (__main__.TestFoo)") == (Kind.PYTORCH, "test_x", "TestFoo")
    assert name_parse("test_x (test_ops.TestFooCPU)") == (Kind.PYTORCH, "test_x", "TestFooCPU")
    assert name_parse("test/test_ops.py::TestFoo{DEVICE}::test_x_{device}") == (Kind.GENERIC, "", "")
    for bad in ("", "test_x", "test_x (__main__.TestFoo", "a b::c", "x" * 1001):
        with pytest.raises(ValueError):
            name_parse(bad)


def test_an_import_adds_every_entry_with_its_parts(npu, tmp_path):
    out = run("acme/npu", write(tmp_path, FILE))

    assert listed(npu) == FILE
    assert "Applied to acme/npu: 3 to add, 0 to change, 0 to remove." in out
    assert f"+ test_add_npu_float32 (__main__.TestBinaryUfuncsPRIVATEUSE1) {ISSUE} [linux]" in out
    row = DisabledTest.objects.get(name__startswith="test_add")
    parts = (row.kind, row.test_name, row.class_name)
    assert parts == (Kind.PYTORCH, "test_add_npu_float32", "TestBinaryUfuncsPRIVATEUSE1")
    assert (row.actor, row.reason.startswith("imported from ")) == ("import_disabled_tests", True)
    assert DisabledTest.objects.get(name__endswith="test_conv").kind == Kind.GENERIC


def test_a_re_import_of_the_same_file_changes_nothing(npu, tmp_path):
    path = write(tmp_path, FILE)
    run("acme/npu", path)
    before = list(DisabledTest.objects.values_list("id", "updated_at"))

    out = run("acme/npu", path)

    assert out.strip() == f"{path}: 3 entries, acme/npu already matches."
    assert list(DisabledTest.objects.values_list("id", "updated_at")) == before


def test_an_import_applies_the_diff_and_keeps_what_it_does_not_set(npu, tmp_path):
    run("acme/npu", write(tmp_path, FILE))
    kept = DisabledTest.objects.get(name="test_sort (__main__.TestSortAndSelect)")
    DisabledTest.objects.filter(pk=kept.pk).update(reason="hangs on npu")
    new = dict(FILE)
    del new["test/test_nn.py::TestNN::test_conv"]
    new["test_sort (__main__.TestSortAndSelect)"] = [ISSUE, ["linux", "rocm"]]
    new["test_mm (__main__.TestLinalg)"] = ["", []]

    out = run("acme/npu", write(tmp_path, new))

    assert listed(npu) == new
    assert "- test/test_nn.py::TestNN::test_conv" in out
    assert f"~ test_sort (__main__.TestSortAndSelect) → {ISSUE} [linux, rocm]" in out
    assert "+ test_mm (__main__.TestLinalg)" in out
    assert "1 to add, 1 to change, 1 to remove" in out
    kept.refresh_from_db()
    assert (kept.reason, kept.platforms) == ("hangs on npu", ["linux", "rocm"])


def test_keep_others_keeps_entries_missing_from_the_file(npu, tmp_path):
    run("acme/npu", write(tmp_path, FILE))

    out = run("acme/npu", write(tmp_path, {"test_mm (__main__.TestLinalg)": ["", []]}), "--keep-others")

    assert "1 to add, 0 to change, 0 to remove" in out
    assert len(listed(npu)) == 4


def test_a_dry_run_prints_the_diff_and_writes_nothing(npu, tmp_path):
    run("acme/npu", write(tmp_path, FILE))
    new = {"test_sort (__main__.TestSortAndSelect)": ["", ["win"]], "test_mm (__main__.TestLinalg)": ["", []]}

    out = run("acme/npu", write(tmp_path, new), "--dry-run")

    assert out.splitlines() == [
        "- test/test_nn.py::TestNN::test_conv",
        "- test_add_npu_float32 (__main__.TestBinaryUfuncsPRIVATEUSE1)",
        "+ test_mm (__main__.TestLinalg)",
        "~ test_sort (__main__.TestSortAndSelect) → [win]",
        "Dry run for acme/npu: 1 to add, 1 to change, 2 to remove. Nothing was written.",
    ]
    assert listed(npu) == FILE


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "not JSON"),
        ('["a list"]', "not a JSON object"),
        ('{"test_x": ["", []]}', '"test_x": neither PyTorch'),
        ('{"test_x (__main__.TestA)": ["", "linux"]}', "[issue_url, [platforms]]"),
        ('{"test_x (__main__.TestA)": ["", [], "extra"]}', "[issue_url, [platforms]]"),
        ('{"test_x (__main__.TestA)": ["issue 12", []]}', "an http(s) URL"),
        ('{"test_x (__main__.TestA)": ["", ["linux", ""]]}', "platforms must be names"),
    ],
)
def test_a_bad_file_is_refused_naming_the_entry_and_nothing_is_written(npu, tmp_path, text, says):
    good = {f"test_{i} (__main__.TestA)": ["", []] for i in range(5)}
    text = text if not text.startswith('{"') else json.dumps(good | json.loads(text))

    with pytest.raises(CommandError) as refused:
        run("acme/npu", write(tmp_path, text))

    assert "is not a valid disabled-tests file; nothing changed" in str(refused.value)
    assert says in str(refused.value)
    assert not DisabledTest.objects.exists()


def test_it_reads_standard_input_and_refuses_an_unknown_backend(npu):
    run("ACME/NPU", "-", stdin=json.dumps(FILE))
    assert listed(npu) == FILE
    with pytest.raises(CommandError, match="other/repo is not a backend"):
        run("other/repo", "-", stdin="{}")


def test_the_file_of_one_backend_leaves_the_others_alone(npu, make_backend, tmp_path):
    cuda = make_backend("acme/cuda")
    run("acme/cuda", write(tmp_path, FILE))

    run("acme/npu", write(tmp_path, {"test_mm (__main__.TestLinalg)": ["", []]}))

    assert listed(cuda) == FILE and list(listed(npu)) == ["test_mm (__main__.TestLinalg)"]


def test_a_long_import_reports_progress_in_batches(npu, tmp_path):
    big = {f"test_{i:05d} (__main__.TestBig)": ["", []] for i in range(registry.BATCH + 10)}
    err = io.StringIO()

    call_command("import_disabled_tests", "acme/npu", write(tmp_path, big), stdout=io.StringIO(), stderr=err)

    total = len(big)
    assert err.getvalue().splitlines() == [f"applied {registry.BATCH}/{total}", f"applied {total}/{total}"]
    assert DisabledTest.objects.count() == len(big)
