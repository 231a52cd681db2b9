"""The admin of the shared domain, one module per registry; importing the package registers them all."""

from ootci.admin import alerts, backends, disabled, failures, governance  # noqa: F401  (they register their models)
