"""Failure rules (the save-time regex check, the TOML format) and the class precedence behind the HUD's split."""

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command

from ootci.failures.rules import (
    DEFAULT_RULES,
    RulesFileError,
    Verdict,
    failure_verdict,
    regex_problem,
    rules_export,
    rules_import,
)
from ootci.models import FailureRule, JobResult


def test_nested_repeats_are_accepted_because_re2_matches_them_in_linear_time():
    # Refused when rules ran on Python's backtracking engine; RE2 runs them in time linear in the line.
    assert regex_problem(r"(a+)+$") == ""
    assert regex_problem(r"ERROR: (\w+\s?)+!") == ""


@pytest.mark.parametrize(
    ("regex", "named"),
    [
        (r"FAILED (?=test)", "a lookahead or lookbehind"),
        (r"(?<!Warning: )error", "a negative lookahead or lookbehind"),
        (r"(\w+) \1", "a backreference"),
        (r"(?P<w>\w+) (?P=w)", "a named backreference"),
        (r"(?>a+)b", "an atomic group"),
        (r"a*+b", "a possessive repeat"),
    ],
)
def test_what_re2_does_not_do_is_refused_by_name(regex, named):
    problem = regex_problem(regex)
    assert problem.startswith("Rules run on RE2, a linear-time engine, which does not support " + named), problem
    assert problem.endswith("rewrite the regex without it.")


def test_an_invalid_or_empty_matching_regex_is_refused():
    assert regex_problem("(unclosed") == "Not a valid regular expression for RE2: missing ): (unclosed."
    assert "every log" in regex_problem(r"x*")


def test_a_sane_regex_passes():
    assert regex_problem(r"^FAILED (\S+::\S+)") == ""


@pytest.mark.django_db
def test_saving_a_rule_re2_cannot_run_through_model_validation_is_refused():
    rule = FailureRule(name="lookahead", regex=r"error(?!: expected)", failure_class="test")
    with pytest.raises(ValidationError) as refused:
        rule.full_clean()
    assert "does not support a negative lookahead" in refused.value.message_dict["regex"][0]


@pytest.mark.usefixtures("failure_rules")
def test_every_default_rule_passes_the_check():
    assert FailureRule.objects.count() >= 40
    for rule in FailureRule.objects.all():
        assert regex_problem(rule.regex) == "", rule.name


@pytest.mark.django_db
def test_export_then_import_changes_nothing():
    FailureRule.objects.create(name='quote " and \\ back', regex=r"a\"b\\c", failure_class="lint", enabled=False)
    text = rules_export()
    counts = rules_import(text)
    assert counts["created"] == counts["updated"] == 0
    assert rules_export() == text


@pytest.mark.django_db
def test_an_import_with_problems_names_each_and_changes_nothing():
    text = (
        '[[rule]]\nname = "a"\nclass = "weird"\nregex = "(?=a)b"\n[[rule]]\nname = "a"\nclass = "infra"\nregex = "ok"\n'
    )
    before = FailureRule.objects.count()
    with pytest.raises(RulesFileError) as refused:
        rules_import(text)
    problems = "\n".join(refused.value.problems)
    assert "class must be one of" in problems
    assert "does not support a lookahead" in problems
    assert "used twice" in problems
    assert FailureRule.objects.count() == before


@pytest.mark.django_db
def test_the_commands_import_and_export_rules(tmp_path, capsys):
    FailureRule.objects.all().delete()
    call_command("import_failure_rules")  # the default set
    assert FailureRule.objects.count() == DEFAULT_RULES.read_text().count("[[rule]]")
    target = tmp_path / "rules.toml"
    call_command("export_failure_rules", str(target))
    assert target.read_text() == rules_export()


def test_the_precedence_puts_relay_facts_first_and_test_results_last():
    base = {
        "relay_decided": False,
        "step_class": "",
        "rule_class": "",
        "report_class": "",
        "callback_test_failure": True,
    }
    assert failure_verdict(**{**base, "relay_decided": True, "rule_class": "test"}) == Verdict("infra", "relay")
    assert failure_verdict(**{**base, "step_class": "infra", "rule_class": "test"}) == Verdict("infra", "step")
    assert failure_verdict(**{**base, "rule_class": "build"}) == Verdict("build", "rule")
    assert failure_verdict(**{**base, "rule_class": "unknown"}) == Verdict("test", "callback")
    assert failure_verdict(**{**base, "callback_test_failure": False}) == Verdict("infra", "none")


@pytest.mark.django_db
def test_a_classified_failure_decides_the_outcome(make_backend):
    backend = make_backend()
    job = JobResult.objects.create(
        backend=backend,
        delivery_id="d",
        event_type="pull_request",
        upstream_repo="pytorch/pytorch",
        workflow_name="w",
        job_name="j",
        run_id="1",
        status="completed",
        conclusion="failure",
    )
    assert JobResult.objects.get(pk=job.pk).outcome == "infra"  # no failed tests reported
    JobResult.objects.filter(pk=job.pk).update(failure_class="build")
    assert JobResult.objects.get(pk=job.pk).outcome == "test"
    JobResult.objects.filter(pk=job.pk).update(failure_class="infra", failed=3)
    assert JobResult.objects.get(pk=job.pk).outcome == "infra"
