from django.core.management.base import BaseCommand, CommandError

from ootci import ci_providers
from ootci.management.input import text_of


class Command(BaseCommand):
    stealth_options = ("stdin",)
    help = (
        "Import the CI identities map from the reference relay's ci_providers.yml (Buildkite pipelines by "
        "organization_id/pipeline_id): validate it whole, show the diff, apply it in one transaction, audited. "
        "Mappings the file does not list are removed."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", help="ci_providers.yml, or - for standard input")
        parser.add_argument("--dry-run", action="store_true", help="Print what would change and write nothing")
        parser.add_argument("--reason", default="", help="Recorded on every change")

    def handle(self, *args, path: str, dry_run: bool, reason: str, **options):
        text = text_of(path, options)
        try:
            plan = ci_providers.plan(*ci_providers.parse(text))
        except ci_providers.CiProvidersError as exc:
            problems = "\n  ".join(exc.problems)
            raise CommandError(f"{path} is not a valid ci_providers file; nothing was changed:\n  {problems}") from None
        for line in plan.notes + plan.lines:
            self.stdout.write(line)
        if plan.empty:
            self.stdout.write(f"{path}: {plan.mappings} pipeline mappings, the database already matches.")
            return
        summary = f"{len(plan.add)} to add, {len(plan.change)} to change, {len(plan.remove)} to remove"
        if dry_run:
            self.stdout.write(f"Dry run: {summary}. Nothing was written.")
            return
        ci_providers.apply(plan, actor="import_ci_providers", reason=reason or f"imported from {path}")
        self.stdout.write(self.style.SUCCESS(f"Applied: {summary}."))
