"""Create the ClickHouse database and table for the HUD when missing (safe to run again)."""

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from hud import clickhouse


class Command(BaseCommand):
    help = "Create the ClickHouse table oot_workflow_job (and its database) if missing; idempotent."

    def handle(self, *args, **options) -> None:
        if not clickhouse.is_configured():
            raise CommandError("CLICKHOUSE_URL is not set: nothing to create.")
        try:
            clickhouse.ensure_schema()
        except (clickhouse.ClickHouseError, ImproperlyConfigured) as ex:
            raise CommandError(str(ex)) from ex
        where = settings.CLICKHOUSE_URL.rpartition("@")[2]
        self.stdout.write(self.style.SUCCESS(f"ClickHouse table {clickhouse.TABLE} is ready ({where})."))
