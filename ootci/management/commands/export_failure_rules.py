from pathlib import Path

from django.core.management.base import BaseCommand

from ootci.failures.rules import rules_export


class Command(BaseCommand):
    help = "Export every failure rule as TOML, to PATH or standard output."

    def add_arguments(self, parser):
        parser.add_argument("path", nargs="?", help="File to write; standard output when omitted")

    def handle(self, *args, path: str | None, **options):
        text = rules_export()
        if path:
            Path(path).write_text(text)
            self.stderr.write(f"Wrote {path}")
        else:
            self.stdout.write(text, ending="")
