"""Hostile upload bodies for the fuzz suite: archive and XML bombs, path tricks, truncations and lies about the
format, each a few kilobytes on the wire."""

import functools
import gzip
import io
import tarfile
import zipfile

from tests.ootci.reports.test_junit import BILLION_LAUGHS, EXTERNAL_ENTITY
from tests.relay.report_files import junit_xml


def _zip(files: dict[str, bytes], compression=zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return out.getvalue()


def _tar(members: list[tarfile.TarInfo], data: dict[str, bytes], mode: str = "w:gz") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode) as archive:
        for info in members:
            archive.addfile(info, io.BytesIO(data.get(info.name, b"")) if info.isfile() else None)
    return out.getvalue()


def _link(name: str, target: str, kind=tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def _file(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    return info


GOOD = junit_xml(passed=3, failed=1)
NESTED = _zip({"inner.zip": _zip({"inner2.zip": _zip({"r.xml": GOOD})})})


@functools.cache
def bodies() -> list[bytes]:
    """Built once, on first use: the bombs cost a second of compression."""
    bomb = _zip({"report.xml": b"<testsuites>" + b" " * (64 * 1024 * 1024) + b"</testsuites>"})
    return [*BODIES, bomb, bomb[: len(bomb) // 2], gzip.compress(b"\0" * (64 * 1024 * 1024))]


BODIES = [
    GOOD,
    BILLION_LAUGHS,
    EXTERNAL_ENTITY,
    gzip.compress(BILLION_LAUGHS),
    NESTED,
    _zip({"../../../../etc/cron.d/x.xml": GOOD, "/abs/report.xml": GOOD, "ok/../../r.xml": GOOD}),
    _zip({"r.xml": GOOD}, zipfile.ZIP_STORED)[:-22],  # no end of central directory
    _zip({f"r{n}.xml": GOOD for n in range(300)}),  # many members
    _tar([_file("r.xml", len(GOOD)), _link("evil.xml", "/etc/passwd")], {"r.xml": GOOD}),
    _tar([_link("hard.xml", "/etc/shadow", tarfile.LNKTYPE), _file("../../x.xml", len(GOOD))], {"../../x.xml": GOOD}),
    _tar([_file("r.xml", len(GOOD))], {"r.xml": GOOD}, mode="w"),
    b"PK\x03\x04" + b"\xff" * 64,  # a zip's magic, then garbage
    b"\x1f\x8b\x08\x00" + b"\x00" * 32,  # a gzip's magic, then garbage
    b"<?xml version='1.0' encoding='utf-32'?><testsuites/>",
    b"<testsuites>" + b"<testsuite>" * 20000,  # deep nesting, never closed
    "<testsuites><testsuite><testcase name='\ud800'/></testsuite></testsuites>".encode("utf-8", "surrogatepass"),
    b"",
]
CONTENT_TYPES = [
    "application/xml",
    "text/xml",
    "application/zip",
    "application/gzip",
    "application/x-tar",
    "application/octet-stream",
    "text/plain",
    "multipart/form-data; boundary=x",
    "",
]
