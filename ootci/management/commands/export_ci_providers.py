from pathlib import Path

from django.core.management.base import BaseCommand

from ootci import ci_providers


class Command(BaseCommand):
    help = "Export the CI identities map as the reference relay's ci_providers.yml, to PATH or standard output."

    def add_arguments(self, parser):
        parser.add_argument("path", nargs="?", help="File to write; standard output when omitted")

    def handle(self, *args, path: str | None, **options):
        text = ci_providers.export_yaml()
        if path:
            Path(path).write_text(text)
            self.stderr.write(f"Wrote {path}")
        else:
            self.stdout.write(text, ending="")
