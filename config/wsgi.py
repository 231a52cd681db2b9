import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

from relay.checks import refuse_to_start  # noqa: E402 - once the apps are loaded

refuse_to_start()  # with DEBUG off: stores that lose data stop the start, saying what to fix
