"""HUD bookkeeping: how far job results have been copied to ClickHouse (the HUD itself reads ootci models)."""

from datetime import datetime

from django.db import models
from django.db.models import F, Q


class ReplicationCursor(models.Model):
    """The durable high-water mark of one replication stream, in PostgreSQL beside the rows it tracks.

    Rows are copied in (updated_at, id) order; `last_updated_at`/`last_id` is the last row ClickHouse
    accepted. `reread_from` is where the next run must start at the latest: a row whose transaction committed
    after a run had read past its updated_at is picked up there (see hud.stores.clickhouse.connection.replicate). It
    only moves forward when a run reaches the end of the table, so an interrupted run never skips such a row.
    """

    name = models.CharField(max_length=50, unique=True)
    last_updated_at = models.DateTimeField(null=True, blank=True, help_text="updated_at of the last copied row")
    last_id = models.BigIntegerField(default=0, help_text="id of the last copied row")
    reread_from = models.DateTimeField(null=True, blank=True, help_text="Start of the overlap the next run re-reads")
    rows_copied = models.BigIntegerField(default=0, help_text="Rows sent, re-sent overlap rows included")
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} at {self.last_updated_at} #{self.last_id}"

    def start_position(self, *, bound: datetime) -> tuple[datetime, int] | None:
        """Where a run starting now reads from: (updated_at, id) to read after, or None for the first row."""
        if self.reread_from is None:
            # First run since a reset: rows still uncommitted now will have updated_at after `bound`.
            self.reread_from = bound
            self.save(update_fields=["reread_from"])
        if self.last_updated_at is None:
            return None
        if self.last_updated_at < self.reread_from:
            return self.last_updated_at, self.last_id
        return self.reread_from, 0

    def advance(self, *, updated_at: datetime, row_id: int, rows: int) -> None:
        """Move past a batch ClickHouse accepted; never backwards, so an overlapping run cannot undo progress."""
        ahead = Q(last_updated_at__isnull=True) | Q(last_updated_at__lt=updated_at)
        ahead |= Q(last_updated_at=updated_at, last_id__lt=row_id)
        moved = ReplicationCursor.objects.filter(ahead, pk=self.pk).update(last_updated_at=updated_at, last_id=row_id)
        ReplicationCursor.objects.filter(pk=self.pk).update(rows_copied=F("rows_copied") + rows)
        if moved:
            self.last_updated_at, self.last_id = updated_at, row_id

    def finish(self, *, reread_from: datetime, at: datetime) -> None:
        """Record a run that reached the end of the table."""
        self.reread_from, self.last_success_at, self.last_error = reread_from, at, ""
        self.save(update_fields=["reread_from", "last_success_at", "last_error"])

    def fail(self, *, error: str, at: datetime) -> None:
        self.last_error, self.last_error_at = error[:2000], at
        self.save(update_fields=["last_error", "last_error_at"])

    def reset(self) -> None:
        """Start again from the first row (re-sent rows collapse in ClickHouse)."""
        self.last_updated_at, self.last_id, self.reread_from = None, 0, None
        self.save(update_fields=["last_updated_at", "last_id", "reread_from"])
