"""Real servers for the tests: find them on loopback, start them when they are down.

Under ``CI=true`` a server that cannot be reached or started is a test failure; elsewhere the
tests that need it are skipped with the reason. Each test gets its own database / key prefix.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest

from speedlayer.testing.cluster import free_port  # noqa: F401 — tests take it from here too

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class Service:
    name: str
    host: str
    port: int
    #: the commands that start it on this machine kind (Debian packages), tried in order
    start: tuple[tuple[str, ...], ...]


def _pg_start() -> tuple[str, ...]:
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    return ("pg_ctlcluster", "--skip-systemctl-redirect", versions[-1] if versions else "15", "main", "start")


REDIS = Service("Redis", "127.0.0.1", 6379, (
    ("redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port", "6379", "--save", "",
     "--appendonly", "no", "--dir", tempfile.gettempdir()),
))
POSTGRES = Service("PostgreSQL", "127.0.0.1", 5432, (_pg_start(),))
MARIADB = Service("MariaDB", "127.0.0.1", 3306, (
    ("start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd"),
))


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with closing(socket.create_connection((host, port), timeout=timeout)):
            return True
    except OSError:
        return False


def unavailable(reason: str) -> None:
    """Fail under CI, skip elsewhere, always saying why."""
    if IN_CI:
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def ensure(service: Service, wait_s: float = 30.0) -> None:
    """Make sure ``service`` answers on its port, starting it if it is down."""
    if port_open(service.host, service.port):
        return
    tried = []
    for command in service.start:
        if shutil.which(command[0]) is None:
            tried.append(f"{command[0]} not installed")
            continue
        result = subprocess.run(command, capture_output=True, text=True)
        tried.append(f"{' '.join(command[:2])}: rc {result.returncode}")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if port_open(service.host, service.port):
                return
            time.sleep(0.3)
    unavailable(f"{service.name} is not running on {service.host}:{service.port} and could not be started ({'; '.join(tried)})")


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


class RedisServer:
    """A dedicated redis-server on a free port with its own directory (for durability tests).

    ``restart()`` shuts it down the way an operator does (``SHUTDOWN``: the append-only file is
    synced) and starts it again on the same port with the same directory, so it reloads its data.

    >>> with RedisServer(appendonly=True, appendfsync="always") as server: server.restart()  # doctest: +SKIP
    """

    def __init__(self, appendonly: bool = True, appendfsync: str = "everysec"):
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="speedlayer-redis-"))
        self.appendonly, self.appendfsync = appendonly, appendfsync
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        if shutil.which("redis-server") is None:
            unavailable("redis-server is not installed (Debian package redis-server)")
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir),
             "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", self.appendfsync, "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while not self._answers():
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                unavailable(f"a dedicated redis-server did not start on port {self.port}")
            time.sleep(0.1)
        return self

    def _client(self):
        """A client that tries once (redis-py would otherwise retry a command the server closed on)."""
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        return redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))

    def _answers(self) -> bool:
        """Whether the server answers PING (not only listens: it refuses commands while loading its data)."""
        import redis

        client = self._client()
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def restart(self) -> None:
        """SHUTDOWN (the server syncs its append-only file and exits), then start again: same port, same directory."""
        assert self.process is not None
        client = self._client()
        client.shutdown()
        client.close()
        self.process.wait(15)
        self.start()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
