"""The admin of the shared domain, one module per registry; the app registers them when it is ready (``ootci.apps``),
so that the relay's admin can import ``ootci.admin.base`` without loading every registry."""
