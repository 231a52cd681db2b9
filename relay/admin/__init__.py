"""The relay's admin: webhook deliveries and their dispatches, and test reports; importing the package registers
them."""

from relay.admin import deliveries, reports  # noqa: F401  (they register their models)
