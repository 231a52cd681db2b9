"""The fake GitHub itself: it must not be the bottleneck of what the relay tests and benchmarks measure."""

import http.client
import socket
import threading

import pytest

from tests.fakes.github import FakeGitHub, app_key_generate

CONNECTIONS = 128


def test_it_holds_128_connections_waiting_to_be_accepted():
    fake = FakeGitHub(app_id=1, public_pem=app_key_generate().public_pem).start()
    server = fake._server
    # Stop accepting: every connection made from now on can only wait in the listen backlog. Past a full backlog
    # the kernel drops the SYN and connect() does not complete.
    server.shutdown()
    connections: list[socket.socket] = []
    try:
        for _ in range(CONNECTIONS):
            connections.append(socket.create_connection(server.server_address[:2], timeout=5))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        for connection in connections:
            connection.sendall(b"GET /nowhere HTTP/1.0\r\n\r\n")
        answers = [connection.makefile("rb").readline() for connection in connections]
        assert answers == [b"HTTP/1.1 404 Not Found\r\n"] * CONNECTIONS
        assert len(fake.requests_to("GET", "/nowhere")) == CONNECTIONS
    finally:
        for connection in connections:
            connection.close()
        fake.stop()


def test_it_keeps_a_connection_alive_as_github_does_and_ends_it_when_stopped():
    fake = FakeGitHub(app_id=1, public_pem=app_key_generate().public_pem).start()
    host, port = fake._server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        for _ in range(3):
            conn.request("GET", "/nowhere")
            response = conn.getresponse()
            response.read()
            assert (response.status, response.will_close) == (404, False)
        assert fake.connections_opened == 1
        fake.stop()
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):  # not answered on the old connection
            conn.request("GET", "/nowhere")
            conn.getresponse()
    finally:
        conn.close()
