"""Copy every JobResult to ClickHouse, resumably: it shares the replication cursor with the task.

A killed run continues where the last accepted batch ended; `--restart` copies everything again
(copies collapse in ReplacingMergeTree; a table that an older version created is dropped and created again first).
At the end, rows deleted in PostgreSQL are marked deleted and the table is merged (`OPTIMIZE … FINAL`), so that
queries start on one part per month.
"""

import time

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from hud.stores.clickhouse import connection as clickhouse
from hud.stores.clickhouse import copy_jobs


class Progress:
    """Plain-text progress on stderr: rows done / total, rate and ETA, at most a few lines a second."""

    def __init__(self, stream, total: int, every: float = 0.5):
        self.stream, self.total, self.every = stream, total, every
        self.done = 0
        self.started = self.shown = time.monotonic()

    def add(self, rows: int) -> None:
        self.done += rows
        if time.monotonic() - self.shown >= self.every or self.done >= self.total:
            self.show()

    def show(self) -> None:
        self.shown = time.monotonic()
        elapsed = max(self.shown - self.started, 1e-6)
        rate = self.done / elapsed
        left = max(self.total - self.done, 0)
        eta = f"{left / rate:,.0f} s" if rate else "?"
        percent = 100 * self.done / self.total if self.total else 100
        self.stream.write(f"{self.done:,}/{self.total:,} rows ({percent:.0f}%)  {rate:,.0f} rows/s  ETA {eta}")
        self.stream.flush()


class Command(BaseCommand):
    help = "Copy job results to ClickHouse from the replication cursor (resumable), with progress on stderr."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--batch-size", type=int, default=copy_jobs.BATCH_SIZE, help="Rows per insert")
        parser.add_argument("--restart", action="store_true", help="Start again from the first row")

    def handle(self, *args, batch_size: int, restart: bool, **options) -> None:
        if not clickhouse.is_configured():
            raise CommandError("CLICKHOUSE_URL is not set: there is no ClickHouse to copy to.")
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        try:
            if restart:
                if clickhouse.drop_if_outdated():
                    self.stderr.write(f"Dropped {clickhouse.TABLE}, created by an older version; creating it again.")
                copy_jobs.reset_cursor()
            progress = Progress(self.stderr, total=copy_jobs.pending_rows())
            start = "from the first row" if restart else "from the replication cursor"
            self.stderr.write(f"Copying {progress.total:,} job results to ClickHouse, {start}")
            sent = copy_jobs.replicate(batch_size=batch_size, wait=True, on_batch=progress.add)
            pruned = copy_jobs.prune_deleted()
            copy_jobs.optimize()
        except ImproperlyConfigured as ex:
            raise CommandError(str(ex)) from ex
        except clickhouse.ClickHouseError as ex:
            raise CommandError(f"{ex}\nNothing is lost: run the command again to continue from the last batch.") from ex
        if progress.done < progress.total:
            progress.show()
        self.stdout.write(self.style.SUCCESS(f"Copied {sent:,} job results; marked {pruned:,} deleted ones."))
