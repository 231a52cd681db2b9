"""Create the ClickHouse database and table for the HUD when missing (safe to run again); a table an older version
created is refused with what to run (`backfill_clickhouse --restart`)."""

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from hud.stores.clickhouse import connection as clickhouse
from hud.stores.clickhouse import copy_jobs


class Command(BaseCommand):
    help = "Create the ClickHouse table oot_workflow_job (and its database) if missing; idempotent."

    def handle(self, *args, **options) -> None:
        if not clickhouse.is_configured():
            raise CommandError("CLICKHOUSE_URL is not set: nothing to create.")
        try:
            copy_jobs.ensure_schema()
        except (clickhouse.ClickHouseError, ImproperlyConfigured) as ex:
            raise CommandError(str(ex)) from ex
        where = settings.CLICKHOUSE_URL.rpartition("@")[2]
        self.stdout.write(self.style.SUCCESS(f"ClickHouse table {clickhouse.TABLE} is ready ({where})."))
