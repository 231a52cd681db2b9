"""The RFC-0050 allowlist YAML: parse and validate a whole file, diff it against the database, apply, export.

The format (as the reference deployment reads it)::

    L1:
      - org1/repo1                   # plain entry
      - org2/repo2: oncall1, oncall2 # single-key mapping, comma-separated on-calls
    L3:                              # grouped by device
      npu:
        ascend/pytorch-npu: [oncall1, oncall2]
    L4:
      - org5/repo5: oncall1, oncall2
    probes: [pytorch/crcr-test]      # ours: the relay's own probes (Backend.probe); cadences: likewise

Unlike the reference we refuse what it silently ignores (unknown top-level keys such as ``l1``)
and compare repositories ignoring case, as GitHub does.
"""

import re
from dataclasses import dataclass, field, replace

import yaml
from django.db import transaction

from ootci.levels import ORDER, Level
from ootci.models import REPO_PATTERN, Backend, LevelChange, reserved_org_problem

SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")
HANDLE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]*$")


class AllowlistError(ValueError):
    """The file is not a valid allowlist; ``problems`` lists every problem with its line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class Entry:
    repo: str
    level: str
    device: str = ""
    oncalls: tuple[str, ...] = ()
    line: int = 0
    cadence: dict[str, int | None] | None = None  # the `cadences:` section's (model field → minutes), if listed
    probe: bool | None = None  # listed under `probes:`; None when the file has no such section (the flag is kept)


@dataclass
class Plan:
    """What applying a file would change; ``lines`` is the human-readable diff."""

    create: list[Entry] = field(default_factory=list)
    update: list[tuple[Backend, Entry]] = field(default_factory=list)
    disable: list[Backend] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.disable)


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _scalar(node: yaml.Node) -> str | None:
    return str(node.value).strip() if isinstance(node, yaml.ScalarNode) else None


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null")


CADENCE_KEYS = {
    "nightly": "nightly_cadence_minutes",
    "periodic": "periodic_cadence_minutes",
    "grace": "stale_grace_minutes",
}


class _Parser:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.entries: list[Entry] = []
        self.cadences: dict[str, dict[str, int | None]] = {}
        self.probes: set[str] | None = None

    def probe_section(self, node: yaml.Node) -> None:
        """``probes: [org/name, …]``: the backends that are the relay's own probes (an empty list: none)."""
        self.probes = set()
        if _is_null(node):
            return
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, "probes must be a list of org/name entries")
            return
        for i, item in enumerate(node.value):
            if repo := self.repo(item, f"probes[{i}]"):
                self.probes.add(repo.lower())

    def cadence_section(self, node: yaml.Node) -> None:
        """``cadences: {org/name: {nightly: 1440, periodic: 360, grace: 120}}``: minutes; periodic may be null."""
        if _is_null(node):
            return
        if not isinstance(node, yaml.MappingNode):
            self.fail(node, "cadences must be a mapping of org/name: {nightly, periodic, grace} (minutes)")
            return
        for key, value in node.value:
            repo = self.repo(key, "cadences")
            if not repo:
                continue
            if not isinstance(value, yaml.MappingNode):
                self.fail(value, f"cadences.{repo} must be a mapping of nightly, periodic, grace (minutes)")
                continue
            found: dict[str, int | None] = {}
            for name_node, minutes in value.value:
                name, text = _scalar(name_node), _scalar(minutes)
                if name not in CADENCE_KEYS:
                    self.fail(name_node, f"cadences.{repo}: {name!r} is not one of nightly, periodic, grace")
                elif name == "periodic" and _is_null(minutes):
                    found[CADENCE_KEYS[name]] = None
                elif text is None or not text.isascii() or not text.isdigit() or not 0 < int(text) < 10**6:
                    self.fail(minutes, f"cadences.{repo}.{name} must be a number of minutes from 1 to 999999")
                else:
                    found[CADENCE_KEYS[name]] = int(text)
            self.cadences[repo.lower()] = found

    def fail(self, node: yaml.Node, message: str) -> None:
        self.problems.append(f"line {_line(node)}: {message}")

    def repo(self, node: yaml.Node, where: str) -> str | None:
        text = _scalar(node)
        if text is None:
            self.fail(node, f"{where}: expected a repository name as org/name")
            return None
        repo = text.strip("/")
        if not REPO_PATTERN.match(repo):
            self.fail(node, f"{where}: {text!r} is not a repository name of the form org/name")
            return None
        if problem := reserved_org_problem(repo):
            self.fail(node, f"{where}: {problem}")
            return None
        return repo

    def oncalls(self, node: yaml.Node, repo: str) -> tuple[str, ...]:
        if _is_null(node):
            return ()
        if isinstance(node, yaml.ScalarNode):
            items = str(node.value).split(",")
        elif isinstance(node, yaml.SequenceNode) and all(isinstance(n, yaml.ScalarNode) for n in node.value):
            items = [str(n.value) for n in node.value if not _is_null(n)]
        else:
            self.fail(node, f"{repo}: on-calls must be a comma-separated string or a list of GitHub handles")
            return ()
        handles = tuple(h.strip().lstrip("@") for h in items if h.strip())
        for handle in handles:
            if not HANDLE.match(handle):
                self.fail(node, f"{repo}: {handle!r} is not a GitHub handle")
        return handles

    def listed_level(self, level: str, node: yaml.Node) -> None:
        if _is_null(node):
            return
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, f"{level} must be a list of org/name entries")
            return
        for i, item in enumerate(node.value):
            where = f"{level}[{i}]"
            if isinstance(item, yaml.MappingNode):
                if len(item.value) != 1:
                    self.fail(item, f"{where}: a mapping entry must have exactly one key, org/name: on-calls")
                    continue
                key, value = item.value[0]
                repo = self.repo(key, where)
                if repo:
                    self.add(Entry(repo, level, oncalls=self.oncalls(value, repo), line=_line(item)))
            else:
                repo = self.repo(item, where)
                if repo:
                    self.add(Entry(repo, level, line=_line(item)))

    def device_level(self, level: str, node: yaml.Node) -> None:
        if _is_null(node):
            return
        if not isinstance(node, yaml.MappingNode):
            self.fail(node, f"{level} must be a mapping of device → {{org/name: [on-calls]}}")
            return
        for device_node, repos in node.value:
            device = _scalar(device_node) or ""
            if not SLUG.match(device):
                self.fail(device_node, f"{level}: device {device!r} must be a slug (letters, digits, - and _)")
                continue
            if _is_null(repos):
                continue
            if not isinstance(repos, yaml.MappingNode):
                self.fail(repos, f"{level}.{device} must be a mapping of org/name: [on-calls]")
                continue
            for key, value in repos.value:
                repo = self.repo(key, f"{level}.{device}")
                if repo:
                    self.add(Entry(repo, level, device, self.oncalls(value, repo), _line(key)))

    def add(self, entry: Entry) -> None:
        for seen in self.entries:
            if seen.repo.lower() == entry.repo.lower():
                self.problems.append(
                    f"line {entry.line}: duplicate repo {entry.repo} ({entry.level}); "
                    f"already listed on line {seen.line} ({seen.level})"
                )
                return
        self.entries.append(entry)


def parse(text: str) -> list[Entry]:
    """Every entry of an allowlist file, or AllowlistError listing every problem found."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise AllowlistError([f"not valid YAML: {exc}"]) from exc
    if root is None or _is_null(root):
        return []
    if not isinstance(root, yaml.MappingNode):
        raise AllowlistError([f"line {_line(root)}: the top level must be a mapping of L1, L2, L3, L4"])
    parser = _Parser()
    for key, value in root.value:
        level = _scalar(key)
        if level == "cadences":
            parser.cadence_section(value)
        elif level == "probes":
            parser.probe_section(value)
        elif level not in ORDER:
            parser.fail(key, f"unknown level {level!r}: the keys are L1, L2, L3 and L4 (case matters)")
        elif level == Level.L3:
            parser.device_level(level, value)
        else:
            parser.listed_level(level, value)
    listed = {entry.repo.lower() for entry in parser.entries}
    for repo in parser.cadences.keys() - listed:
        parser.problems.append(f"cadences: {repo} is not listed at any level")
    for repo in sorted((parser.probes or set()) - listed):
        parser.problems.append(f"probes: {repo} is not listed at any level")
    if parser.problems:
        raise AllowlistError(parser.problems)
    probes = parser.probes
    return [
        replace(
            entry,
            cadence=parser.cadences.get(entry.repo.lower()),
            probe=None if probes is None else entry.repo.lower() in probes,
        )
        for entry in parser.entries
    ]


def plan(entries: list[Entry]) -> Plan:
    """Compare a parsed file with the database. Fields the format cannot express are left alone."""
    result = Plan()
    existing = {b.repo.lower(): b for b in Backend.objects.all()}
    for entry in entries:
        backend = existing.pop(entry.repo.lower(), None)
        if backend is None:
            result.create.append(entry)
            device = f" device {entry.device}" if entry.device else ""
            result.lines.append(f"+ {entry.repo}: add at {entry.level}{device}")
            continue
        changes = []
        if backend.level != entry.level:
            changes.append(f"level {backend.level} → {entry.level}")
        if entry.device and backend.device != entry.device:
            changes.append(f"device {backend.device or '—'} → {entry.device}")
        if list(entry.oncalls) != list(backend.oncalls):
            changes.append(f"on-calls {', '.join(backend.oncalls) or '—'} → {', '.join(entry.oncalls) or '—'}")
        if not backend.enabled:
            changes.append("enable")
        for name, minutes in (entry.cadence or {}).items():
            if getattr(backend, name) != minutes:
                changes.append(f"{name} {getattr(backend, name)} → {minutes}")
        if entry.probe is not None and entry.probe != backend.probe:
            changes.append("the relay's probe" if entry.probe else "no longer the relay's probe")
        if changes:
            result.update.append((backend, entry))
            result.lines.append(f"~ {backend.repo}: {'; '.join(changes)}")
    for backend in existing.values():
        if backend.enabled:
            result.disable.append(backend)
            result.lines.append(f"- {backend.repo}: disable (not in the file)")
    return result


def apply(changes: Plan, *, actor: str, reason: str) -> list[LevelChange]:
    """Write a plan in one transaction, with a LevelChange for every new backend and level move; returns the moves
    of existing backends (``ootci.governance.allowlist_applied`` reviews them)."""
    moves = []
    with transaction.atomic():
        for entry in changes.create:
            cadence = entry.cadence or {}
            backend = Backend(repo=entry.repo, device=entry.device, oncalls=list(entry.oncalls), **cadence)
            backend.probe = bool(entry.probe)
            backend.change_level(entry.level, actor=actor, reason=reason)
        for backend, entry in changes.update:
            backend.device = entry.device or backend.device
            backend.oncalls = list(entry.oncalls)
            backend.enabled = True
            for name, minutes in (entry.cadence or {}).items():
                setattr(backend, name, minutes)
            backend.probe = backend.probe if entry.probe is None else entry.probe
            fields = ["device", "oncalls", "enabled", "probe", *CADENCE_KEYS.values(), "updated_at"]
            backend.save(update_fields=fields)
            if change := backend.change_level(entry.level, actor=actor, reason=reason):
                moves.append(change)
        for backend in changes.disable:
            backend.enabled = False
            backend.save(update_fields=["enabled", "updated_at"])
    return moves


def export_data(moved: dict[int, str] | None = None) -> dict:
    """The enabled allowlist as the RFC structure (plain dicts and lists, ready for YAML or JSON); ``moved`` (backend
    id → level) shows it as it would be with those backends at those levels."""
    data: dict = {level: [] for level in ORDER}
    data[Level.L3] = {}
    for backend in Backend.objects.filter(enabled=True).order_by("repo"):
        backend.level = (moved or {}).get(backend.pk, backend.level)
        if backend.level == Level.L3:
            data[Level.L3].setdefault(backend.device, {})[backend.repo] = list(backend.oncalls)
        elif backend.oncalls:
            data[backend.level].append({backend.repo: ", ".join(backend.oncalls)})
        else:
            data[backend.level].append(backend.repo)
    data[Level.L3] = dict(sorted(data[Level.L3].items()))
    cadences = {}
    for backend in Backend.objects.filter(enabled=True).order_by("repo"):
        values = {key: getattr(backend, name) for key, name in CADENCE_KEYS.items()}
        defaults = {key: Backend._meta.get_field(name).default for key, name in CADENCE_KEYS.items()}
        defaults["periodic"] = None
        if values != defaults:
            cadences[backend.repo] = values
    if cadences:
        data["cadences"] = cadences
    if probes := list(Backend.objects.filter(enabled=True, probe=True).order_by("repo").values_list("repo", flat=True)):
        data["probes"] = probes
    return data


def export_yaml(moved: dict[int, str] | None = None) -> str:
    """The allowlist in the RFC's own layout (block entries, `org/name: a, b` on-calls, L3 by device).

    Written by hand rather than by yaml.dump, whose flow mappings (`- {org/name: a}`) read badly;
    every name was validated against a pattern that needs no quoting.
    """
    data = export_data(moved)
    lines = []
    for level in ORDER:
        entries = data[level]
        if not entries:
            lines.append(f"{level}: {{}}" if level == Level.L3 else f"{level}: []")
            continue
        lines.append(f"{level}:")
        if level == Level.L3:
            for device, repos in entries.items():
                lines.append(f"  {device}:")
                lines += [f"    {repo}: [{', '.join(oncalls)}]" for repo, oncalls in repos.items()]
            continue
        for entry in entries:
            if isinstance(entry, dict):
                ((repo, oncalls),) = entry.items()
                lines.append(f"  - {repo}: {oncalls}")
            else:
                lines.append(f"  - {entry}")
    if cadences := data.get("cadences"):  # only backends whose cadences are not the defaults
        lines.append("cadences:")
        for repo, values in cadences.items():
            shown = ", ".join(f"{key}: {'null' if minutes is None else minutes}" for key, minutes in values.items())
            lines.append(f"  {repo}: {{{shown}}}")
    if probes := data.get("probes"):
        lines.append(f"probes: [{', '.join(probes)}]")
    return "\n".join(lines) + "\n"
