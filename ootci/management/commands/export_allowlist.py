from pathlib import Path

from django.core.management.base import BaseCommand

from ootci import allowlist


class Command(BaseCommand):
    help = "Export the enabled allowlist as RFC-0050 YAML, to PATH or standard output."

    def add_arguments(self, parser):
        parser.add_argument("path", nargs="?", help="File to write; standard output when omitted")

    def handle(self, *args, path: str | None, **options):
        text = allowlist.export_yaml()
        if path:
            Path(path).write_text(text)
            self.stderr.write(f"Wrote {path}")
        else:
            self.stdout.write(text, ending="")
