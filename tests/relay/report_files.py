"""Test-report bodies for the relay's tests: JUnit XML as pytest writes it, and archives of it."""

import io
import tarfile
import zipfile


def junit_xml(
    *, passed: int = 3, failed: int = 1, reruns: int = 0, classname="test_ops.TestCommonPRIVATEUSE1"
) -> bytes:
    cases = [f'<testcase classname="{classname}" name="test_add_npu_float{i}" time="0.5"/>' for i in range(passed)]
    cases += [
        f'<testcase classname="{classname}" name="test_mul_npu_int{i}" time="1.25">'
        + '<rerun message="flaky once">first try</rerun>' * reruns
        + f'<failure message="AssertionError: {i} != {i + 1}">Traceback (most recent call last):\n'
        + "AssertionError</failure>"
        "</testcase>"
        for i in range(failed)
    ]
    total = passed + failed
    return (
        f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="{total}" '
        f'failures="{failed}">{"".join(cases)}</testsuite></testsuites>'
    ).encode()


def zipped(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return out.getvalue()


def tar_gz(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()
