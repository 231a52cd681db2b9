from django.apps import AppConfig
from django.db.backends.signals import connection_created


class Percentile:
    """``percentile_cont(value, fraction)`` for SQLite: the continuous percentile PostgreSQL computes."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.fraction = 0.5

    def step(self, value, fraction) -> None:
        self.fraction = fraction
        if value is not None:
            self.values.append(float(value))

    def finalize(self) -> float | None:
        if not self.values:
            return None
        values = sorted(self.values)
        pos = (len(values) - 1) * self.fraction
        low = int(pos)
        high = min(low + 1, len(values) - 1)
        return values[low] + (values[high] - values[low]) * (pos - low)


def add_sqlite_functions(sender, connection, **kwargs) -> None:
    if connection.vendor == "sqlite":
        connection.connection.create_aggregate("percentile_cont", 2, Percentile)


class HudConfig(AppConfig):
    name = "hud"
    verbose_name = "HUD"

    def ready(self) -> None:
        from hud import tasks
        from hud.figures import queries
        from ootci import gates, replication

        connection_created.connect(add_sqlite_functions)
        # ootci never imports the read side: the HUD hands it what the write side and the level gates call.
        gates.figures_from(queries.readiness_figures)
        replication.replicate_with(tasks.clickhouse_replicate_soon)
