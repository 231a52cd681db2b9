import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
pages = get_wsgi_application()

from config.handlers import WriteEndpointsHandler, write_endpoint  # noqa: E402 - once the apps are loaded
from relay.checks import refuse_to_start  # noqa: E402

refuse_to_start()  # with DEBUG off: stores that lose data stop the start, saying what to fix
writes = WriteEndpointsHandler()


def application(environ, start_response):
    """The relay's write endpoints through their own short middleware chain, everything else through the HUD's."""
    handler = writes if write_endpoint(environ.get("PATH_INFO", "")) else pages
    return handler(environ, start_response)
