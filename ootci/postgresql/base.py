"""Django's PostgreSQL backend, with a health check that asks the server nothing when the connection is idle and sound.

With ``CONN_HEALTH_CHECKS`` (config/settings.py) Django checks a persistent connection before the first statement of
every request, and django-q2 has it checked before every task: Django asks the server ``SELECT 1``. That round trip
was one of five on a callback's path and one of three on its follow-up task. A server that ends a connection
(a restart, ``pg_terminate_backend``, an idle timeout, a failover) sends its reason and closes the socket, so an idle
connection with nothing to read on its socket was not ended by the server: that is looked at without a round trip
(a poll that does not wait). When the socket has something to read, or the connection saw an error, the server is
asked as before. What no poll can see, a peer gone without a word (a dropped network path), the old check did not
see either until its own round trip timed out: now the request's first statement fails instead, and a callback is
journaled (``relay.reliability.journal``) as on any database failure.
"""

import select

from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        if self.errors_occurred:
            return super().is_usable()
        try:
            socket = self.connection.fileno()
        except base.Database.Error:  # closed: no socket to look at
            return False
        poll = select.poll()  # not select(), which refuses a descriptor past 1023
        poll.register(socket, select.POLLIN)
        return not poll.poll(0) or super().is_usable()
