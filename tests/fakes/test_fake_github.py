"""The fake GitHub itself: it must not be the bottleneck of what the relay tests and benchmarks measure."""

import socket
import threading

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
        assert answers == [b"HTTP/1.0 404 Not Found\r\n"] * CONNECTIONS
        assert len(fake.requests_to("GET", "/nowhere")) == CONNECTIONS
    finally:
        for connection in connections:
            connection.close()
        fake.stop()
