"""manage.py reclassify --days 7: run the failure rules again over the failed jobs of a window (after a rule change)."""

from datetime import timedelta

from django.core.management.base import BaseCommand
from django.utils import timezone

from ootci.models import JobResult
from relay.reports import logs


class Command(BaseCommand):
    help = "Classify again the failed jobs of L2+ backends finished in the last --days days (stored logs are reused)."

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, default=7, help="Window in days (default 7)")

    def handle(self, *args, days: int, **options):
        if days < 1:
            self.stderr.write("--days must be at least 1.")
            raise SystemExit(2)
        since = timezone.now() - timedelta(days=days)
        ids = list(
            JobResult.objects.filter(finished_at__gte=since, conclusion__in=logs.FAILED_CONCLUSIONS)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        self.stdout.write(f"{len(ids)} failed jobs in the last {days} days")
        for n, pk in enumerate(ids, start=1):
            verdict = logs.job_log_classify(job_id=pk)
            self.stdout.write(f"[{n}/{len(ids)}] job {pk}: {verdict}")
        self.stdout.write(self.style.SUCCESS(f"Reclassified {len(ids)} jobs."))
