"""The reference relay's ``ci_providers.yml``: read and validate a whole file, diff it against the CI identities map,
apply it (every change audited, ``ootci.identities``), export the map.

The format, as the reference deployment reads it::

    providers:
      buildkite:
        repo_map:
          <organization_id>/<pipeline_id>: owner/repo        # simple: any build of the pipeline
          <organization_id>/<pipeline_id>:                   # constrained: only builds whose token carries these
            repo: owner/repo
            required_claims:
              build_branch: [main, nightly]
    buildkite:                                               # the legacy flat section: the same mappings
      <organization_id>/<pipeline_id>: {repo: owner/repo, required_claims: {build_branch: [main]}}

Issuers and key sets (``issuer``, ``jwks_uri``, a ``github`` provider) are trust anchors, read from the settings
only: in a file they are ignored with a note, never stored. Keys must be the immutable UUIDs, never slugs.
"""

import json
import re
from dataclasses import dataclass, field

import yaml
from django.db import transaction

from ootci.identities import pipeline_remove, pipeline_save
from ootci.models import REPO_PATTERN, Backend, BuildkitePipeline, required_claims_problem

UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
TRUST_ANCHORS = ("issuer", "jwks_uri")


class CiProvidersError(ValueError):
    """The file is not valid; ``problems`` lists every problem with its line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class Mapping:
    key: str  # <organization_id>/<pipeline_id>, lower case
    repo: str
    required_claims: dict[str, list[str]]
    line: int = 0

    @property
    def recorded(self) -> dict:
        return {"repo": self.repo, "required_claims": self.required_claims}


@dataclass
class Plan:
    """What applying a file would change; ``lines`` is the human-readable diff, ``notes`` what was ignored."""

    add: list[tuple[Mapping, Backend]] = field(default_factory=list)
    change: list[tuple[BuildkitePipeline, Mapping, Backend]] = field(default_factory=list)
    remove: list[BuildkitePipeline] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    mappings: int = 0

    @property
    def empty(self) -> bool:
        return not (self.add or self.change or self.remove)


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _scalar(node: yaml.Node) -> str | None:
    if not isinstance(node, yaml.ScalarNode) or node.tag.endswith(":null"):
        return None
    return str(node.value).strip()


class _Reader:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.found: dict[str, Mapping] = {}

    def fail(self, node: yaml.Node, message: str) -> None:
        self.problems.append(f"line {_line(node)}: {message}")

    def mapping(self, node: yaml.Node, where: str) -> list[tuple[yaml.Node, yaml.Node]] | None:
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null"):
            return []
        if not isinstance(node, yaml.MappingNode):
            self.fail(node, f"{where} must be a mapping")
            return None
        return node.value

    def provider(self, name: str, node: yaml.Node, where: str, *, flat: bool = False) -> None:
        """A provider's section: trust anchors noted and ignored; Buildkite's repo map (or, flat, the map itself)."""
        for key, value in self.mapping(node, where) or []:
            text = _scalar(key) or ""
            if text in TRUST_ANCHORS:
                self.notes.append(
                    f"line {_line(key)}: {where}.{text} ignored: issuers and key sets are set in the settings "
                    "(OIDC_ISSUER, OIDC_JWKS_URL, OIDC_BUILDKITE_JWKS_URL), never by this file"
                )
            elif name == "buildkite" and text == "repo_map" and not flat:
                for entry_key, entry in self.mapping(value, f"{where}.repo_map") or []:
                    self.entry(entry_key, entry, f"{where}.repo_map")
            elif name == "buildkite" and flat:
                self.entry(key, value, where)
            else:
                self.fail(key, f"{where}: unknown key {text!r} (expected repo_map, issuer or jwks_uri)")

    def entry(self, key_node: yaml.Node, node: yaml.Node, where: str) -> None:
        key = self.key(key_node, where)
        if isinstance(node, yaml.MappingNode):
            fields = {_scalar(k) or "": v for k, v in node.value}
            for name in fields.keys() - {"repo", "required_claims"}:
                self.fail(node, f"{where}.{key}: unknown key {name!r} (expected repo and required_claims)")
            if "repo" not in fields:
                self.fail(node, f"{where}.{key}: the constrained form needs repo: owner/repo")
                return
            repo = self.repo(fields["repo"], f"{where}.{key}.repo")
            claims = self.claims(fields["required_claims"], f"{where}.{key}") if "required_claims" in fields else {}
        else:
            repo, claims = self.repo(node, f"{where}.{key}"), {}
        if key is None or repo is None or claims is None:
            return
        mapping = Mapping(key, repo, claims, _line(key_node))
        seen = self.found.get(key)
        if seen is None:
            self.found[key] = mapping
        elif seen.recorded != mapping.recorded:
            self.fail(key_node, f"{key} is mapped differently on line {seen.line}: one pipeline reports as one backend")

    def key(self, node: yaml.Node, where: str) -> str | None:
        text = _scalar(node) or ""
        parts = text.split("/")
        if len(parts) == 2 and all(UUID.match(p) for p in parts):
            return text.lower()
        self.fail(
            node,
            f"{where}: {text!r} is not <organization_id>/<pipeline_id>: use the UUIDs (a token's organization_id and "
            "pipeline_id claims), never the slugs, which can be renamed and then claimed by someone else",
        )
        return None

    def repo(self, node: yaml.Node, where: str) -> str | None:
        text = (_scalar(node) or "").strip("/")
        if not REPO_PATTERN.match(text):
            self.fail(node, f"{where}: expected the backend's repository as owner/repo, got {text or 'nothing'!r}")
            return None
        return text

    def claims(self, node: yaml.Node, where: str) -> dict[str, list[str]] | None:
        claims: dict[str, list[str]] = {}
        for name_node, values in self.mapping(node, f"{where}.required_claims") or []:
            name = _scalar(name_node) or ""
            if isinstance(values, yaml.SequenceNode):
                accepted = [_scalar(v) for v in values.value]
            else:
                accepted = [_scalar(values)]
            if None in accepted:
                self.fail(values, f"{where}.required_claims.{name}: accepted values must be texts, e.g. [main]")
                return None
            claims[name] = list(dict.fromkeys(accepted))
        if problem := required_claims_problem(claims):
            self.fail(node, f"{where}.required_claims: {problem}")
            return None
        return claims


def parse(text: str) -> tuple[list[Mapping], list[str]]:
    """Every mapping of a ``ci_providers.yml`` and the notes on what was ignored, or CiProvidersError listing every
    problem found (repositories not checked: see :func:`plan`)."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise CiProvidersError([f"not valid YAML: {exc}"]) from exc
    reader = _Reader()
    for key, value in (reader.mapping(root, "the top level") or []) if root is not None else []:
        name = _scalar(key)
        if name == "providers":
            for provider_key, section in reader.mapping(value, "providers") or []:
                provider = _scalar(provider_key) or ""
                if provider in ("buildkite", "github"):
                    reader.provider(provider, section, f"providers.{provider}")
                else:
                    reader.fail(
                        provider_key,
                        f"providers.{provider}: only Buildkite pipelines can be mapped here (GitHub Actions tokens "
                        "name their repository; other issuers are not accepted)",
                    )
        elif name == "buildkite":
            reader.provider("buildkite", value, "buildkite", flat=True)
        else:
            reader.fail(key, f"unknown top-level key {name!r} (expected providers, or the legacy buildkite section)")
    if reader.problems:
        raise CiProvidersError(reader.problems)
    return list(reader.found.values()), reader.notes


def plan(mappings: list[Mapping], notes: list[str] = ()) -> Plan:
    """Compare the mappings with the database; CiProvidersError names every repository not in the allowlist."""
    backends = {b.repo.lower(): b for b in Backend.objects.all()}
    problems = [
        f"line {m.line}: {m.repo} is not in the allowlist: import or add the backend first"
        for m in mappings
        if m.repo.lower() not in backends
    ]
    if problems:
        raise CiProvidersError(problems)
    result = Plan(notes=list(notes), mappings=len(mappings))
    existing = {p.key: p for p in BuildkitePipeline.objects.select_related("backend")}
    for mapping in mappings:
        backend = backends[mapping.repo.lower()]
        pipeline = existing.pop(mapping.key, None)
        after = {"repo": backend.repo, "required_claims": mapping.required_claims}
        if pipeline is None:
            result.add.append((mapping, backend))
            result.lines.append(f"+ {mapping.key}: {_shown(after)}")
        elif pipeline.as_recorded() != after:
            result.change.append((pipeline, mapping, backend))
            result.lines.append(f"~ {mapping.key}: {_shown(pipeline.as_recorded())} → {_shown(after)}")
    for pipeline in existing.values():
        result.remove.append(pipeline)
        result.lines.append(f"- {pipeline.key}: {_shown(pipeline.as_recorded())} (not in the file)")
    return result


def _shown(state: dict) -> str:
    claims = "; ".join(f"{k} in [{', '.join(v)}]" for k, v in state["required_claims"].items())
    return state["repo"] + (f" when {claims}" if claims else "")


def apply(changes: Plan, *, actor: str, reason: str) -> None:
    """Write a plan in one transaction, each change with its IdentityChange row."""
    with transaction.atomic():
        for pipeline in changes.remove:
            pipeline_remove(pipeline=pipeline, actor=actor, reason=reason)
        for mapping, backend in changes.add:
            org, pipe = mapping.key.split("/")
            new = BuildkitePipeline(backend=backend, organization_id=org, pipeline_id=pipe)
            new.required_claims = mapping.required_claims
            pipeline_save(pipeline=new, actor=actor, reason=reason)
        for pipeline, mapping, backend in changes.change:
            before = pipeline.as_recorded()
            pipeline.backend, pipeline.required_claims = backend, mapping.required_claims
            pipeline_save(pipeline=pipeline, actor=actor, reason=reason, before=before)


def export_yaml() -> str:
    """The map in the reference's layout: ``providers.buildkite.repo_map`` and the same mappings in the legacy flat
    ``buildkite`` section, each in the simple form unless it has required claims. Written by hand (block style, every
    value quoted as a JSON string, which YAML reads back as the same text)."""
    entries = []
    for pipeline in BuildkitePipeline.objects.select_related("backend").order_by("backend__repo", "pk"):
        if not pipeline.required_claims:
            entries.append([f"{pipeline.key}: {pipeline.backend.repo}"])
            continue
        lines = [f"{pipeline.key}:", f"  repo: {pipeline.backend.repo}", "  required_claims:"]
        for name, accepted in pipeline.required_claims.items():
            lines.append(f"    {_key(name)}: [{', '.join(json.dumps(v) for v in accepted)}]")
        entries.append(lines)
    out = [
        "# CI identities of OOT CI (manage.py export_ci_providers), in the reference relay's ci_providers.yml format.",
        "# Issuers and key sets are not here: they are trust anchors, set in the settings.",
        "providers:",
        "  buildkite:",
        "    repo_map:" + ("" if entries else " {}"),
    ]
    out += ["      " + line for lines in entries for line in lines]
    out += ["# The legacy flat section: the same mappings, for relays that read only this one.", "buildkite:"]
    out[-1] += "" if entries else " {}"
    out += ["  " + line for lines in entries for line in lines]
    return "\n".join(out) + "\n"


def _key(name: str) -> str:
    """A claim name as a YAML key: plain unless YAML would read it as something else than that text (yes, null)."""
    return name if yaml.safe_load(name) == name else json.dumps(name)
