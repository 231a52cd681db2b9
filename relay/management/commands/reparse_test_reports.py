from django.core.management.base import BaseCommand
from django.db import transaction

from ootci.models import TestReport
from relay.reports.reparse import reports_reparse


class Command(BaseCommand):
    help = (
        "Parse test reports again from their raw bytes in TEST_REPORTS_URL (after a parser fix or a crash): "
        "the given report ids, or every report in the given states (default: pending and failed)."
    )

    def add_arguments(self, parser):
        parser.add_argument("ids", nargs="*", type=int, help="Report ids; all reports in --state when omitted")
        parser.add_argument(
            "--state",
            action="append",
            choices=TestReport.State.values,
            help="Re-parse reports in this state (repeatable; default pending and failed)",
        )

    def handle(self, *args, ids: list[int], state: list[str] | None, **options):
        states = tuple(state or ([] if ids else [TestReport.State.PENDING, TestReport.State.FAILED]))
        with transaction.atomic():
            count = reports_reparse(report_ids=ids or None, states=states)
        self.stdout.write(f"{count} report(s) queued for parsing.")
