"""Failure classes: the precedence that decides a failed job's class, the rule check, and the rules' TOML format.

The precedence is stated here once (README "How we count"); relay.reports.logs applies it when it classifies a job and
``JobResult.outcome`` reads the class it stores.
"""

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import transaction

from ootci.failures.regex import regex_problem
from ootci.models import Backend, FailureClass, FailureRule, JobFailure

DEFAULT_RULES = Path(__file__).with_name("rules.toml")
FIELDS = ("name", "class", "priority", "regex", "backend", "enabled", "notes")


@dataclass(frozen=True)
class Verdict:
    failure_class: str  # infra, build, test or lint
    source: str  # a JobFailure.Source


def failure_verdict(
    *, relay_decided: bool, step_class: str, rule_class: str, report_class: str, callback_test_failure: bool
) -> Verdict:
    """The class of a failed job attempt, first of:

    1. relay facts: timed out by the sweeper (a lost dispatch has no job at all and is counted as infra by the HUD);
    2. the failed step: runner set-up and checkout failures are infra whatever the log says;
    3. the matched log rule, unless its class is ``unknown``;
    4. the parsed test report (``report_class``: see relay.reports.logs.parsed_report_class);
    5. the callback's test results: a ``failure`` with failed tests is a test failure;
    6. otherwise infra: nothing says the code under test broke.
    """
    if relay_decided:
        return Verdict(FailureClass.INFRA, JobFailure.Source.RELAY)
    if step_class:
        return Verdict(step_class, JobFailure.Source.STEP)
    if rule_class and rule_class != FailureClass.UNKNOWN:
        return Verdict(rule_class, JobFailure.Source.RULE)
    if report_class:
        return Verdict(report_class, JobFailure.Source.TEST_REPORT)
    if callback_test_failure:
        return Verdict(FailureClass.TEST, JobFailure.Source.CALLBACK)
    return Verdict(FailureClass.INFRA, JobFailure.Source.NONE)


# --- TOML import and export ------------------------------------------------------------------------------------------


class RulesFileError(Exception):
    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def rules_parse(text: str) -> list[dict[str, Any]]:
    """The ``[[rule]]`` tables of a rules file, validated whole: every problem is named, with the rule's name."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RulesFileError([f"Not valid TOML: {e}"]) from e
    entries = data.get("rule", [])
    if not isinstance(entries, list) or set(data) - {"rule"}:
        raise RulesFileError(["A rules file holds only [[rule]] tables."])
    problems: list[str] = []
    seen: set[str] = set()
    rules = []
    for n, entry in enumerate(entries, start=1):
        rule, found = _rule_parse(entry, n, seen)
        problems += found
        rules.append(rule)
    if problems:
        raise RulesFileError(problems)
    return rules


def _rule_parse(entry: dict[str, Any], n: int, seen: set[str]) -> tuple[dict[str, Any], list[str]]:
    name = entry.get("name")
    where = f"rule {n} ({name})" if isinstance(name, str) else f"rule {n}"
    problems = [f"{where}: unknown key {key!r}" for key in entry if key not in FIELDS]
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        problems.append(f"{where}: needs a name of 1 to 100 characters")
    elif name in seen:
        problems.append(f"{where}: the name is used twice")
    seen.add(name if isinstance(name, str) else "")
    if entry.get("class") not in FailureClass.values:
        problems.append(f"{where}: class must be one of {', '.join(FailureClass.values)}")
    if not isinstance(entry.get("priority", 0), int) or isinstance(entry.get("priority"), bool):
        problems.append(f"{where}: priority must be an integer")
    if not isinstance(entry.get("enabled", True), bool):
        problems.append(f"{where}: enabled must be true or false")
    regex = entry.get("regex")
    if not isinstance(regex, str):
        problems.append(f"{where}: needs a regex")
    elif problem := regex_problem(regex):
        problems.append(f"{where}: {problem}")
    backend = entry.get("backend") or ""
    if backend and not Backend.objects.filter(repo__iexact=backend).exists():
        problems.append(f"{where}: backend {backend!r} is not in the allowlist")
    rule = {
        "name": name,
        "failure_class": entry.get("class"),
        "priority": entry.get("priority", 0),
        "regex": regex,
        "backend": backend,
        "enabled": entry.get("enabled", True),
        "notes": str(entry.get("notes") or ""),
    }
    return rule, problems


@transaction.atomic
def rules_import(text: str) -> dict[str, int]:
    """Create or update the file's rules by name (all or nothing); rules the file does not name are kept."""
    counts = {"created": 0, "updated": 0, "unchanged": 0}
    for rule in rules_parse(text):
        backend = Backend.objects.filter(repo__iexact=rule.pop("backend")).first() if rule["backend"] else None
        values = {**rule, "backend": backend}
        current = FailureRule.objects.filter(name=rule["name"]).first()
        if current is None:
            FailureRule.objects.create(**values)
            counts["created"] += 1
        elif any(getattr(current, k) != v for k, v in values.items()):
            FailureRule.objects.filter(pk=current.pk).update(**values)
            counts["updated"] += 1
        else:
            counts["unchanged"] += 1
    return counts


def rules_export() -> str:
    """Every rule as TOML, highest priority first (strings written as TOML basic strings, JSON's escapes)."""
    out = ["# OOT CI failure rules: manage.py import_failure_rules reads this file back.", ""]
    for rule in FailureRule.objects.select_related("backend").order_by("-priority", "name"):
        out.append("[[rule]]")
        out.append(f"name = {_toml(rule.name)}")
        out.append(f"class = {_toml(rule.failure_class)}")
        out.append(f"priority = {rule.priority}")
        out.append(f"regex = {_toml(rule.regex)}")
        if rule.backend:
            out.append(f"backend = {_toml(rule.backend.repo)}")
        if not rule.enabled:
            out.append("enabled = false")
        if rule.notes:
            out.append(f"notes = {_toml(rule.notes)}")
        out.append("")
    return "\n".join(out)


def _toml(text: str) -> str:
    # JSON's string escapes (\" \\ \n \t \uXXXX) are all TOML basic-string escapes.
    return json.dumps(text, ensure_ascii=False)
