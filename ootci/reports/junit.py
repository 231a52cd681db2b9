"""The JUnit XML parser for downstream test reports: untrusted bytes in, cases and counts out, or a refusal.

Reads one XML file, or a zip or tar.gz of them, optionally gzip-encoded, from a stream: archive entries are read
one by one as streams (never extracted, never opened by a name we build), XML is parsed incrementally by
defusedxml (entity declarations and external references refused), and every cap is checked while reading, so a
hostile report costs at most the caps. Nothing is returned for a refused report: the caller writes all or nothing.

Formats: pytest ``--junitxml`` (xunit1 and xunit2), unittest-xml-reporting (PyTorch's
``test-reports/python-unittest/**/*.xml``) and Buildkite/Jenkins JUnit: ``testsuites``/``testsuite``/``testcase``
with ``failure``, ``error``, ``skipped``; pytest-rerunfailures ``rerun`` and Surefire/PyTorch ``rerunFailure``,
``rerunError``, ``flakyFailure``, ``flakyError`` markers are counted as reruns.
"""

import gzip
import io
import re
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import iterparse

from ootci.models.reports import MESSAGE_CAP, TestReport
from ootci.reports import blobs

MAX_COMPRESSED = 50 * 1024 * 1024
MAX_INFLATED = 1024 * 1024 * 1024
MAX_RATIO = 100
# The ratio is judged once this much is inflated: a small, very regular XML file may legitimately compress 200×.
RATIO_FLOOR = 1024 * 1024
MAX_CASES = 200_000
MAX_PROPERTIES = 200
TEST_ID_CAP = 1000
CHUNK = 1024 * 1024

RERUN_TAGS = frozenset({"rerun", "rerunFailure", "rerunError", "flakyFailure", "flakyError"})
ZIP_MAGIC = b"PK\x03\x04"
EMPTY_ZIP_MAGIC = b"PK\x05\x06"
GZIP_MAGIC = b"\x1f\x8b"


class ReportRefused(Exception):
    """The report is hostile, malformed or over a cap; ``reason`` says which (it is recorded on the report)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class Case:
    file: str
    classname: str
    name: str
    test_id: str
    status: str
    duration: float
    reruns: int
    message: str


@dataclass
class Parsed:
    """A whole report: counts over every case, and every case."""

    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("passed", "failed", "error", "skipped", "xfail", "xpass"), 0)
    )
    cases: int = 0
    reruns: int = 0
    duration: float = 0.0
    kept: list[Case] = field(default_factory=list)
    files: int = 0
    # The suites' <properties> (not a case's own): where the tests ran (ootci.environment.environment_from_properties).
    properties: dict[str, str] = field(default_factory=dict)

    def property_add(self, name: str, value: str) -> None:
        if len(self.properties) < MAX_PROPERTIES and name:
            self.properties.setdefault(name[:100], value[:1000])

    def add(self, case: Case) -> None:
        self.counts[case.status] += 1
        self.reruns += case.reruns
        self.duration += case.duration
        self.kept.append(case)


def report_parse(stream: BinaryIO, *, compressed_size: int, encoding: str = "", device: str = "") -> Parsed:
    """Parse a stored report; raise ReportRefused with the reason when it must not be used."""
    if compressed_size > MAX_COMPRESSED:
        raise ReportRefused(f"The report is {compressed_size} bytes compressed; the cap is {MAX_COMPRESSED}.")
    budget = _Budget(compressed_size)
    with tempfile.SpooledTemporaryFile(max_size=8 * CHUNK) as spool:
        source: BinaryIO = stream
        if encoding == "gzip":
            source = _Counted(gzip.GzipFile(fileobj=stream, mode="rb"), budget)
        parsed = Parsed()
        renamer = DeviceNames(device)
        try:
            head = _peek(source, spool, budget)
            if head.startswith((ZIP_MAGIC, EMPTY_ZIP_MAGIC)):
                for name, entry in _zip_entries(spool, budget):
                    _xml_cases(entry, parsed, renamer, name)
            elif head.startswith(GZIP_MAGIC):
                for name, entry in _tar_entries(spool, budget):
                    _xml_cases(entry, parsed, renamer, name)
            else:
                _xml_cases(_Counted(spool, None), parsed, renamer, "the report")
        except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError, gzip.BadGzipFile) as e:
            raise ReportRefused(f"The report is not a readable zip, tar.gz or gzip stream ({e}).") from e
    if parsed.files == 0:
        raise ReportRefused("The report holds no JUnit XML file.")
    return parsed


def stored_report_parse(report: TestReport) -> Parsed:
    """Parse ``report`` from its raw bytes in the intermediate store (TEST_REPORTS_URL) for its backend's device;
    raises ReportRefused, blobs.Missing when the bytes are gone, or the store's error."""
    with blobs.reports_store().open(report.store_key) as stream:
        return report_parse(
            stream,
            compressed_size=report.size,
            encoding=report.content_encoding,
            device=report.job.backend.device,
        )


class DeviceNames:
    """Makes test names generic: the backend's device in class and test names becomes ``{DEVICE}``/``{device}``, so
    ``TestCommonPRIVATEUSE1::test_add_npu_float32`` on an ``npu`` backend reads
    ``TestCommon{DEVICE}::test_add_{device}_float32`` on every backend."""

    def __init__(self, device: str) -> None:
        names = ["privateuse1"] + ([re.escape(device.lower())] if device else [])
        alternatives = "|".join(names)
        self.klass = re.compile(rf"({alternatives})(?=$|[^a-z0-9])", re.IGNORECASE)
        self.test = re.compile(rf"(?<=[_\[\-.])({alternatives})(?=$|[_\]\-.:0-9])", re.IGNORECASE)

    def generic_id(self, file: str, klass: str, name: str) -> str:
        klass = self.klass.sub("{DEVICE}", klass)
        name = self.test.sub("{device}", name)
        return "::".join(part for part in (file, klass, name) if part)[:TEST_ID_CAP]


def case_place(classname: str, file: str) -> tuple[str, str]:
    """(file, class) of a case: pytest and unittest write the module path dotted in ``classname`` and may leave
    ``file`` out; a class is the last dotted part when it starts with an upper-case letter."""
    module, _, last = classname.rpartition(".")
    klass = last if last[:1].isupper() else ""
    if not klass:
        module = classname
    if not file and module and module != "__main__":
        file = module.replace(".", "/") + ".py"
    return file, klass


# --- reading archives by stream -------------------------------------------------------------------------------------


class _Budget:
    """The inflated bytes read so far, against the 1 GB cap and the ratio cap."""

    def __init__(self, compressed: int) -> None:
        self.compressed = max(compressed, 1)
        self.inflated = 0

    def spend(self, n: int) -> None:
        self.inflated += n
        if self.inflated > MAX_INFLATED:
            raise ReportRefused(f"The report inflates past {MAX_INFLATED} bytes (1 GB).")
        if self.inflated > RATIO_FLOOR and self.inflated > MAX_RATIO * self.compressed:
            raise ReportRefused(
                f"The report inflates more than {MAX_RATIO} times its {self.compressed} compressed bytes (a zip bomb?)."
            )


class _Counted(io.RawIOBase):
    """A read-only stream that charges what it yields to a budget (None: already charged)."""

    def __init__(self, inner: BinaryIO, budget: _Budget | None) -> None:
        self.inner, self.budget = inner, budget

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self.inner.read(CHUNK if size is None or size < 0 else size)
        if self.budget is not None:
            self.budget.spend(len(data))
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _peek(source: BinaryIO, spool, budget: _Budget) -> bytes:
    """Copy the (decoded) report into ``spool`` (archives need seeking) and return its first bytes."""
    copied = 0
    while chunk := source.read(CHUNK):
        copied += len(chunk)
        if copied > MAX_COMPRESSED and not isinstance(source, _Counted):
            raise ReportRefused(f"The report is over {MAX_COMPRESSED} bytes compressed.")
        spool.write(chunk)
    spool.seek(0)
    head = spool.read(4)
    spool.seek(0)
    return head


def _safe_member(name: str) -> None:
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or ".." in parts or re.match(r"^[A-Za-z]:", name):
        raise ReportRefused(f"The archive names a path outside itself: {name[:200]!r}.")


def _zip_entries(spool, budget: _Budget) -> Iterator[tuple[str, BinaryIO]]:
    with zipfile.ZipFile(spool) as archive:
        infos = archive.infolist()
        for info in infos:
            _safe_member(info.filename)
        for info in infos:
            if info.is_dir() or not info.filename.lower().endswith(".xml"):
                continue
            with archive.open(info) as entry:  # by its info, as a stream: nothing is written to disk
                yield info.filename, _Counted(entry, budget)


def _tar_entries(spool, budget: _Budget) -> Iterator[tuple[str, BinaryIO]]:
    # Inflated here, not by tarfile, so that every inflated byte (skipped members too) is charged to the budget.
    inflated = _Counted(gzip.GzipFile(fileobj=spool, mode="rb"), budget)
    with tarfile.open(fileobj=inflated, mode="r|") as archive:  # stream mode: no seeking back
        for member in archive:
            _safe_member(member.name)
            if not member.isfile() or not member.name.lower().endswith(".xml"):
                continue  # links and devices are never followed
            entry = archive.extractfile(member)
            if entry is not None:
                yield member.name, entry


# --- JUnit XML --------------------------------------------------------------------------------------------------------


def _xml_cases(stream: BinaryIO, parsed: Parsed, renamer: DeviceNames, where: str) -> None:
    parsed.files += 1
    root = None
    in_case = False
    try:
        for event, element in iterparse(stream, events=("start", "end"), forbid_dtd=False):
            if event == "start":
                if root is None:
                    root = element.tag
                    if root not in ("testsuites", "testsuite"):
                        raise ReportRefused(f"{where} is XML but not JUnit: its root is <{root[:50]}>.")
                in_case = in_case or element.tag == "testcase"
                continue
            if element.tag != "testcase":
                if element.tag == "testsuite":
                    element.clear()
                elif element.tag == "properties" and not in_case:
                    for item in element.iterfind("property"):
                        parsed.property_add(item.get("name") or "", item.get("value") or (item.text or "").strip())
                continue
            in_case = False
            parsed.cases += 1
            if parsed.cases > MAX_CASES:
                raise ReportRefused(f"The report holds more than {MAX_CASES} test cases.")
            parsed.add(_case(element, renamer))
            element.clear()
    except DefusedXmlException as e:
        raise ReportRefused(f"{where} declares entities or external references, which are refused ({e}).") from e
    except SyntaxError as e:  # ParseError
        raise ReportRefused(f"{where} is not well-formed XML ({e}).") from e


def _case(element, renamer: DeviceNames) -> Case:
    attrs = element.attrib
    name = attrs.get("name", "")[:1000]
    classname = attrs.get("classname", "")[:500]
    file, klass = case_place(classname, attrs.get("file", ""))
    status, message, reruns = "passed", "", 0
    for child in element:
        tag = child.tag
        if tag in RERUN_TAGS:
            reruns += 1
        elif tag == "error" and status != "error":
            status, message = "error", _message(child)
        elif tag == "failure" and status not in ("error",):
            text = _message(child)
            status, message = ("xpass" if text.startswith("[XPASS(strict)]") else "failed"), text
        elif tag == "skipped" and status == "passed":
            kind = (child.get("type") or "").lower()
            status = "xfail" if kind in ("pytest.xfail", "xfail") else "skipped"
            message = _message(child)
    if status == "skipped" and "unexpectedsuccess" in message.replace(" ", "").lower():
        status = "xpass"
    try:
        duration = max(0.0, float(attrs.get("time") or 0))
    except ValueError:
        duration = 0.0
    return Case(
        file=file[:500],
        classname=classname,
        name=name,
        test_id=renamer.generic_id(file, klass, name),
        status=status,
        duration=duration if duration < 1e9 else 0.0,
        reruns=reruns,
        message=message,
    )


def _message(element) -> str:
    head = element.get("message") or ""
    body = (element.text or "").strip()
    text = f"{head}\n{body}" if head and body and not body.startswith(head) else (body or head)
    return text.replace("\x00", "")[:MESSAGE_CAP]
