"""The relay's admin: webhook deliveries and their dispatches, test reports, failed jobs' classifications.
Importing the package registers them all."""

from relay.admin import deliveries, failures, reports  # noqa: F401  (they register their models)
