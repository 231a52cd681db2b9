# The page benchmark drives the same Chromium as the browser tests.
from tests.e2e.conftest import browser_context_args, browser_type_launch_args  # noqa: F401

# The fault benchmark sends signed webhooks to the fake GitHub, as the relay tests do.
from tests.relay.conftest import app_key, failing_run, fake_github, post_webhook, upstream  # noqa: F401
