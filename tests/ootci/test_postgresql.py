"""ootci.postgresql: the health check of a persistent connection asks the server nothing while the connection is idle
and sound, and still finds a connection the server ended."""

import select
import tempfile
import time

import pytest
from django.db import connection

from ootci.models import Backend

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's connections (the PostgreSQL lane)"),
    pytest.mark.django_db(transaction=True),  # a connection is ended under the test
]


def sent_by(action) -> bytes:
    """What libpq sent and received on the connection while ``action`` ran (its protocol trace)."""
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile() as trace:
        pgconn.trace(trace.fileno())
        try:
            action()
        finally:
            pgconn.untrace()
        trace.seek(0)
        return trace.read()


def test_a_sound_idle_connection_is_usable_without_a_round_trip():
    connection.ensure_connection()
    usable = []

    assert sent_by(lambda: usable.append(connection.is_usable())) == b""
    assert usable == [True]
    assert b"Query" in sent_by(lambda: Backend.objects.count())  # the trace sees a statement when one is sent


def test_a_connection_the_server_ended_is_found_and_replaced_before_the_next_statement():
    connection.ensure_connection()
    ended = connection.connection.info.backend_pid
    admin = connection.get_new_connection(connection.get_connection_params())
    try:
        admin.autocommit = True
        admin.execute("SELECT pg_terminate_backend(%s)", [ended])
    finally:
        admin.close()
    deadline = time.monotonic() + 5
    while not select.select([connection.connection.fileno()], [], [], 0.05)[0] and time.monotonic() < deadline:
        pass  # the server's goodbye arrives on the socket

    assert connection.is_usable() is False
    connection.close_if_unusable_or_obsolete()  # as every request starts, and django-q2 before every task
    assert Backend.objects.count() == 0  # the health check replaced the connection: no OperationalError
    assert connection.connection.info.backend_pid != ended


def test_a_closed_connection_is_not_usable():
    connection.ensure_connection()
    connection.connection.close()

    assert connection.is_usable() is False
    connection.close()  # Django lets go of it, as its health check would
