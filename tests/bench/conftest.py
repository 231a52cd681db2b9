# The page benchmark drives the same Chromium as the browser tests.
from tests.e2e.conftest import browser_context_args, browser_type_launch_args  # noqa: F401
