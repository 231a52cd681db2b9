"""The JUnit parser on real reports (one written by pytest in the test itself) and on hostile ones."""

import gzip
import io
import subprocess
import sys
import zipfile

import pytest

from ootci.reports import junit
from tests.relay.report_files import junit_xml, tar_gz, zipped

BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>
<testsuites><testsuite><testcase classname="a.B" name="t">&lol3;</testcase></testsuite></testsuites>"""
EXTERNAL_ENTITY = b"""<?xml version="1.0"?>
<!DOCTYPE r [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<testsuites><testsuite><testcase classname="a.B" name="t"><failure>&xxe;</failure></testcase></testsuite>
</testsuites>"""


def parse(data: bytes, **kwargs) -> junit.Parsed:
    return junit.report_parse(io.BytesIO(data), compressed_size=len(data), **kwargs)


def test_a_report_written_by_pytest_parses_to_its_cases(tmp_path):
    (tmp_path / "test_generated.py").write_text(
        "import pytest\n"
        "class TestAddPRIVATEUSE1:\n"
        "    def test_add_npu_float32(self):\n        assert 1 + 1 == 2\n"
        "    def test_sub_npu_int8(self):\n        assert 1 - 1 == 5, 'subtraction is off'\n"
        "    @pytest.mark.skip(reason='not on npu')\n    def test_div_npu(self):\n        pass\n"
        "    @pytest.mark.xfail(reason='known')\n    def test_mod_npu(self):\n        assert False\n"
        "def test_error(broken):\n    pass\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('fixture exploded')\n"
    )
    report = tmp_path / "report.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:django",
         "--junitxml", str(report), "test_generated.py"],
        cwd=tmp_path, capture_output=True, check=False,
    )  # fmt: skip

    parsed = parse(report.read_bytes(), device="npu")

    assert parsed.cases == 5
    assert parsed.counts == {"passed": 1, "failed": 1, "error": 1, "skipped": 1, "xfail": 1, "xpass": 0}
    by_name = {case.name: case for case in parsed.kept}
    assert set(by_name) == {"test_add_npu_float32", "test_sub_npu_int8", "test_div_npu", "test_mod_npu", "test_error"}
    assert by_name["test_add_npu_float32"].status == "passed"
    failed = by_name["test_sub_npu_int8"]
    assert failed.status == "failed" and "subtraction is off" in failed.message
    assert failed.test_id == "test_generated.py::TestAdd{DEVICE}::test_sub_{device}_int8"
    assert by_name["test_error"].status == "error" and "fixture exploded" in by_name["test_error"].message
    assert by_name["test_error"].test_id == "test_generated.py::test_error"
    assert by_name["test_mod_npu"].status == "xfail"


def test_the_device_is_made_generic_in_class_and_test_names():
    names = junit.DeviceNames("npu")
    assert (
        names.generic_id("test_ops.py", "TestCommonPRIVATEUSE1", "test_add_npu_float32")
        == "test_ops.py::TestCommon{DEVICE}::test_add_{device}_float32"
    )
    assert names.generic_id("test_nn.py", "TestNNDeviceTypeNPU", "test_conv[npu-float16]") == (
        "test_nn.py::TestNNDeviceType{DEVICE}::test_conv[{device}-float16]"
    )
    assert names.generic_id("a.py", "TestInput", "test_input_npu") == "a.py::TestInput::test_input_{device}"
    assert names.generic_id("a.py", "TestSnpuX", "test_inpu") == "a.py::TestSnpuX::test_inpu"  # only whole words


def test_reruns_and_unittest_xml_reporting_shapes_are_counted():
    xml = b"""<?xml version="1.0"?><testsuite name="test_ops.TestCommonPRIVATEUSE1" tests="3">
    <testcase classname="test_ops.TestCommonPRIVATEUSE1" file="test_ops.py" name="test_a_npu" time="0.1">
      <rerunFailure message="x"/><flakyFailure message="y"/></testcase>
    <testcase classname="test_ops.TestCommonPRIVATEUSE1" name="test_b" time="0.1">
      <skipped type="XFAIL" message="expected failure"/></testcase>
    <testcase classname="test_ops.TestCommonPRIVATEUSE1" name="test_c" time="0.1">
      <failure message="[XPASS(strict)] should fail"/></testcase></testsuite>"""
    parsed = parse(xml, device="npu")
    assert parsed.counts["passed"] == 1 and parsed.counts["xfail"] == 1 and parsed.counts["xpass"] == 1
    assert parsed.reruns == 2
    flaky = parsed.kept[0]
    assert (flaky.status, flaky.reruns, flaky.test_id) == (
        "passed",
        2,
        "test_ops.py::TestCommon{DEVICE}::test_a_{device}",
    )


def test_zip_tar_gz_and_gzip_encoding_are_read_by_stream():
    files = {"python-unittest/test_ops/a.xml": junit_xml(passed=2, failed=1), "b.xml": junit_xml(passed=3, failed=0)}
    for data in (zipped(files), tar_gz(files)):
        assert parse(data).cases == 6
    encoded = gzip.compress(junit_xml(passed=4, failed=2, reruns=2))
    parsed = parse(encoded, encoding="gzip")
    assert (parsed.cases, parsed.counts["failed"], parsed.reruns) == (6, 2, 4)
    assert len(parsed.kept[0].message) <= 2048


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (BILLION_LAUGHS, "declares entities"),
        (EXTERNAL_ENTITY, "declares entities"),
        (b"<html><body>not a report</body></html>", "not JUnit"),
        (b"<testsuites><testsuite><testcase", "not well-formed"),
        (zipped({"../../etc/cron.d/x.xml": junit_xml()}), "path outside"),
        (tar_gz({"/abs/report.xml": junit_xml()}), "path outside"),
        (zipped({"readme.txt": b"hi"}), "no JUnit XML"),
        (b"PK\x03\x04 truncated", "not a readable"),
    ],
)
def test_hostile_or_broken_reports_are_refused_with_their_reason(data, reason):
    with pytest.raises(junit.ReportRefused, match=reason):
        parse(data)


def test_a_zip_bomb_is_refused_by_its_inflation_ratio():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("bomb.xml", b"<testsuites>" + b" " * (20 * 1024 * 1024) + b"</testsuites>")
    data = out.getvalue()
    assert len(data) < 100 * 1024
    with pytest.raises(junit.ReportRefused, match="inflates more than 100 times"):
        parse(data)


def test_a_million_empty_cases_are_refused_at_the_case_cap():
    data = b"<testsuites><testsuite>" + b"<testcase/>" * 1_000_000 + b"</testsuite></testsuites>"
    with pytest.raises(junit.ReportRefused, match="more than 200000 test cases"):
        parse(data)
