"""Real servers a fault test starts, stops and pauses itself: a redis-server and a throwaway PostgreSQL cluster, each
on a free port of its own, so that the shared ones other tests use are never touched."""

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """``stop()`` ends it (connections refused), ``pause()`` SIGSTOPs it (connections hang), ``start()``/``resume()``
    bring it back on the same port. ``url`` names database 0."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> "RedisServer":
        command = [shutil.which("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        self.process = subprocess.Popen([*command, "--dir", str(self.folder)], stdout=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_timeout=1)
        for _ in range(200):
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def pause(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)


class PostgresCluster:
    """A PostgreSQL cluster of the test's own (initdb in a temporary folder, trust authentication), run with pg_ctl;
    as the postgres user when we are root, as scripts/test.sh does. ``stop()`` is a fast shutdown; ``remove()`` stops
    it and deletes its folder."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        if not found and not shutil.which("pg_ctl"):
            raise RuntimeError("no PostgreSQL server binaries (pg_ctl) on this machine")
        self.bin = Path(found[-1]).parent if found else Path(shutil.which("pg_ctl")).parent
        # Its own folder under /tmp: the postgres user cannot enter pytest's (root's, mode 700).
        self.folder = Path(tempfile.mkdtemp(prefix="ootci-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.folder, "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")

    def start(self) -> "PostgresCluster":
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.folder / "log"), "-w", "start")
        return self

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def create_database(self, name: str) -> None:
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin / tool), *args]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if done.returncode:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
