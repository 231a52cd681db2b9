from django.core.management.base import BaseCommand, CommandError

from ootci import allowlist, governance
from ootci.management.input import text_of


class Command(BaseCommand):
    stealth_options = ("stdin",)
    help = "Import an RFC-0050 allowlist YAML file: validate it whole, show the diff, apply it in one transaction."

    def add_arguments(self, parser):
        parser.add_argument("path", help="Allowlist YAML file, or - for standard input")
        parser.add_argument("--dry-run", action="store_true", help="Print what would change and write nothing")
        parser.add_argument("--reason", default="", help="Recorded on every level change")

    def handle(self, *args, path: str, dry_run: bool, reason: str, **options):
        text = text_of(path, options)
        try:
            entries = allowlist.parse(text)
        except allowlist.AllowlistError as exc:
            problems = "\n  ".join(exc.problems)
            raise CommandError(f"{path} is not a valid allowlist; nothing was changed:\n  {problems}") from None
        plan = allowlist.plan(entries)
        for line in plan.lines:
            self.stdout.write(line)
        if plan.empty:
            self.stdout.write(f"{path}: {len(entries)} backends, the database already matches.")
            return
        summary = f"{len(plan.create)} to add, {len(plan.update)} to change, {len(plan.disable)} to disable"
        if dry_run:
            self.stdout.write(f"Dry run: {summary}. Nothing was written.")
            return
        reviews = governance.allowlist_applied(plan, actor="import_allowlist", reason=reason or f"imported from {path}")
        for review in reviews:
            self.stdout.write(
                f"  {review.backend.repo}: {review.from_level} → {review.to_level}, {review.verdict_text}"
            )
        self.stdout.write(self.style.SUCCESS(f"Applied: {summary}; {len(reviews)} level moves reviewed."))
