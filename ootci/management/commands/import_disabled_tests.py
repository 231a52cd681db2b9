from django.core.management.base import BaseCommand, CommandError

from ootci.disabled import registry
from ootci.management.input import text_of
from ootci.models import Backend


class Command(BaseCommand):
    stealth_options = ("stdin",)
    help = (
        "Import a backend's disabled tests from PyTorch's .pytorch-disabled-tests.json format "
        '({"test_x (__main__.TestClass)": [issue_url, [platforms]]}): validate the whole file, print the diff '
        "(+ added, - removed, ~ issue or platforms changed), apply it in one transaction. The file is the backend's "
        "whole list: entries not in it are removed (added by hand or not), unless --keep-others. Entries already "
        "there keep their reason, who and expiry; only the issue and platforms follow the file."
    )

    def add_arguments(self, parser):
        parser.add_argument("backend", help="The backend, org/repo")
        parser.add_argument("path", help="The JSON file, or - for standard input")
        parser.add_argument("--dry-run", action="store_true", help="Print what would change and write nothing")
        parser.add_argument("--keep-others", action="store_true", help="Keep entries that are not in the file")
        parser.add_argument("--reason", default="", help="Reason recorded on added entries")

    def handle(self, *args, backend: str, path: str, dry_run: bool, keep_others: bool, reason: str, **options):
        found = Backend.objects.filter(repo__iexact=backend).first()
        if found is None:
            raise CommandError(f"{backend} is not a backend in the allowlist")
        try:
            entries = registry.parse(text_of(path, options))
        except registry.DisabledFileError as exc:
            problems = "\n  ".join(exc.problems)
            raise CommandError(f"{path} is not a valid disabled-tests file; nothing changed:\n  {problems}") from None
        plan = registry.plan(found, entries, keep_others=keep_others)
        if plan.lines:
            self.stdout.write("\n".join(plan.lines))
        if plan.empty:
            self.stdout.write(f"{path}: {len(entries)} entries, {found.repo} already matches.")
            return
        if dry_run:
            self.stdout.write(f"Dry run for {found.repo}: {plan.summary}. Nothing was written.")
            return
        registry.apply(
            plan, actor="import_disabled_tests", reason=reason or f"imported from {path}", progress=self.progress
        )
        self.stdout.write(self.style.SUCCESS(f"Applied to {found.repo}: {plan.summary}."))

    def progress(self, done: int, total: int) -> None:
        """On stderr, so the diff on stdout stays clean; only for runs of more than one batch."""
        if total > registry.BATCH:
            self.stderr.write(f"applied {done}/{total}")
