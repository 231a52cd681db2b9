from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from ootci.failures.rules import DEFAULT_RULES, RulesFileError, rules_import


class Command(BaseCommand):
    help = "Create or update failure rules from a TOML file (all or nothing); without a path, the default rule set."

    def add_arguments(self, parser):
        parser.add_argument("path", nargs="?", help="TOML file of [[rule]] tables; the default rules when omitted")

    def handle(self, *args, path: str | None, **options):
        source = Path(path) if path else DEFAULT_RULES
        try:
            counts = rules_import(source.read_text())
        except RulesFileError as e:
            raise CommandError(f"{source}: nothing imported:\n" + "\n".join(e.problems)) from e
        self.stderr.write(", ".join(f"{n} {what}" for what, n in counts.items()))
