"""The labelled corpus of job logs (``failure_logs/``): each log says, in its ``# `` header lines, the line a person
reading it points at as the cause (``# cause:``) and its class (``# class:``), decided by reading, never by running
the classifier. ``tuned/`` is the part the rules were written against. ``held_out_18/`` (the eighteenth and nineteenth
sets, ``h18_*`` and ``h19_*``) was written apart from the rules by two writers who never saw them, its labels unseen
until the rules were frozen, and measured once (README). Seventeen earlier held-out sets were measured the same way and
then tuned on: ``tuned/ho_*``, ``tuned/h2_*`` … ``tuned/h17_*``.

Agreement, as the goal counts it: the chosen line is the labelled one, or the labelled text stands within 3 lines of
it (the same failure printed on two adjacent lines); the text, that is, without the indentation a labeller does not
copy.
"""

import io
import re
from dataclasses import dataclass
from pathlib import Path

from relay.reports.classify import ANSI, TIMESTAMP, Classification, Rule, log_classify

LOGS = Path(__file__).parent / "failure_logs"
TUNED = sorted((LOGS / "tuned").glob("*.log"))
HELD_OUT = sorted((LOGS / "held_out_18").glob("*.log"))
NEAR = 3
NOISE = "2026-03-02T10:{m:02d}:{s:02d}.0000000Z [{n}/100000] Building CXX object torch_npu/csrc/ops/Op{n}.cpp.o\n"


@dataclass(frozen=True)
class Labelled:
    path: Path
    body: bytes
    cause: str
    failure_class: str

    @property
    def lines(self) -> list[str]:
        """The body's lines as the classifier reads them: ANSI codes and the timestamp stripped."""
        text = ANSI.sub(b"", self.body).replace(b"\r", b"").decode("utf-8", errors="replace")
        return [TIMESTAMP.sub("", line, count=1) for line in text.split("\n")]


def labelled(path: Path) -> Labelled:
    text = path.read_text(encoding="utf-8")
    header = [line for line in text.splitlines(keepends=True) if line.startswith("# ")]
    fields = dict(re.findall(r"^# (\w[\w-]*): ?(.*)$", "".join(header), re.MULTILINE))
    assert "cause" in fields and "class" in fields, f"{path.name} does not say its cause and class"
    body = text[sum(map(len, header)) :]
    if noise := fields.get("noise"):  # a long log, kept short in the repository
        body += "".join(NOISE.format(m=n // 60 % 60, s=n % 60, n=n) for n in range(int(noise)))
    return Labelled(path, body.encode(), fields["cause"].rstrip("\n"), fields["class"].strip())


@dataclass(frozen=True)
class Verdict:
    log: Labelled
    found: Classification

    @property
    def line_agrees(self) -> bool:
        m = self.found.match
        if m is None:
            return False
        cause = self.log.cause.strip()  # the text: a labeller does not copy a line's indentation
        lines = self.log.lines
        near = lines[max(0, m.line_number - 1 - NEAR) : m.line_number + NEAR]
        return m.line.strip() == cause or any(line.strip() == cause for line in near)

    @property
    def failure_class(self) -> str:
        return self.found.match.rule.failure_class if self.found.match else ""

    @property
    def test_called_infra(self) -> bool:
        return self.log.failure_class == "test" and self.failure_class == "infra"

    def __str__(self) -> str:
        m = self.found.match
        chosen = f"{m.rule.name} at {m.line_number}: {m.line[:100]!r}" if m else "no line"
        return f"{self.log.path.name}: wanted {self.log.cause[:100]!r} ({self.log.failure_class}), chose {chosen}"


def verdicts(paths: list[Path], rules: list[Rule]) -> list[Verdict]:
    return [Verdict(log, log_classify(io.BytesIO(log.body), rules)) for log in map(labelled, paths)]


def agreement(found: list[Verdict]) -> str:
    agreed = sum(v.line_agrees for v in found)
    return f"{agreed} of {len(found)} logs ({100 * agreed / max(1, len(found)):.0f} %)"
