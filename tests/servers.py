"""Real servers for the tests, shared by every test of a run, each on a free loopback port.

``python -m tests.servers -- COMMAND`` (what ``make test`` runs) starts PostgreSQL, MariaDB, Redis and
a Kafka broker of their own (tests/local_servers.py), runs COMMAND with their ports in its
environment, and stops them. A test process started without them (``pytest tests/sinks`` by hand)
starts the ones it needs itself, on first use, and they end with it.

Under ``CI=true`` a server that cannot be had is a test failure; elsewhere the tests that need it are
skipped with the reason. Each test gets its own database, key prefix or topic.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest

from speedlayer.core.sizes import human_size, tree_size
from speedlayer.testing.cluster import free_port  # noqa: F401 — tests take it from here too
from tests import local_servers
from tests.local_servers import port_open

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
_lock = threading.Lock()


@dataclass(frozen=True)
class Service:
    name: str
    #: the class that starts one (tests/local_servers.py)
    server: type[local_servers.LocalServer]
    host: str = "127.0.0.1"

    @property
    def env(self) -> str:
        """The variable that holds its port for every process of the run (pytest's workers, CLI runs)."""
        return f"SPEEDLAYER_TEST_{self.server.__name__.upper()}_PORT"

    @property
    def port(self) -> int:
        ensure(self)
        return int(os.environ[self.env])


REDIS = Service("Redis", local_servers.Redis)
POSTGRES = Service("PostgreSQL", local_servers.Postgres)
MARIADB = Service("MariaDB", local_servers.MariaDb)
KAFKA = Service("Kafka", local_servers.Kafka)
ALL = (POSTGRES, MARIADB, REDIS, KAFKA)


def unavailable(reason: str) -> None:
    """Fail under CI, skip elsewhere, always saying why."""
    if IN_CI:
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _start(service: Service) -> local_servers.LocalServer:
    server = service.server().start()
    atexit.register(server.stop)
    os.environ[service.env] = str(server.port)
    return server


def ensure(service: Service) -> None:
    """Make sure ``service`` answers on loopback: the run's own, or one this process starts now."""
    with _lock:
        port = os.environ.get(service.env)
        if port and port_open(service.host, int(port)):
            return
        try:
            _start(service)
        except local_servers.ServerError as exc:
            unavailable(str(exc))


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


class RedisServer(local_servers.Redis):
    """A dedicated redis-server (for durability tests), append-only by default.

    ``restart()`` shuts it down the way an operator does (``SHUTDOWN``: the append-only file is
    synced) and starts it again on the same port with the same directory, so it reloads its data.

    >>> with RedisServer(appendonly=True, appendfsync="always") as server: server.restart()  # doctest: +SKIP
    """

    def __init__(self, appendonly: bool = True, appendfsync: str = "everysec"):
        super().__init__(appendonly, appendfsync)

    def start(self, fresh: bool = True) -> RedisServer:
        try:
            return super().start(fresh)
        except local_servers.ServerError as exc:
            unavailable(str(exc))


#: the ports the README's examples use, and the databases they name
USUAL_PORTS = {"PostgreSQL": 5432, "MariaDB": 3306, "Redis": 6379, "Kafka": 9092}
EXAMPLE_DATABASES = ("fleet", "words", "app", "bank")


def serve_on_usual_ports() -> int:
    """``make servers``: every server on its usual loopback port, the examples' databases created, until Ctrl-C."""
    import signal
    import time

    taken = [f"{name} port {port}" for name, port in USUAL_PORTS.items() if port_open("127.0.0.1", port)]
    if taken:
        print(f"servers: {', '.join(taken)} already in use: stop what listens there, or use those servers",
              file=sys.stderr)
        return 1
    started = []
    try:
        for service in ALL:
            server = service.server()
            server.port = USUAL_PORTS[service.name]
            started.append(server.start())
        _create_example_databases()
        print("servers (data in temporary directories, removed at Ctrl-C): "
              "postgresql://postgres@localhost:5432/{" + ",".join(EXAMPLE_DATABASES) + "}, "
              "mysql://root@localhost:3306/{" + ",".join(EXAMPLE_DATABASES) + "}, "
              "redis://localhost:6379/0, kafka://localhost:9092", flush=True)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        while True:
            time.sleep(3600)
    except local_servers.ServerError as exc:
        print(f"servers: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for server in reversed(started):
            server.stop()


def _create_example_databases() -> None:
    import psycopg
    import pymysql

    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        for name in EXAMPLE_DATABASES:
            conn.execute(f"CREATE DATABASE {name}")
    with closing(pymysql.connect(host="127.0.0.1", port=3306, user="root", password="")) as conn, conn.cursor() as cur:
        for name in EXAMPLE_DATABASES:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {name}")


def main(argv: list[str]) -> int:
    """Start every server, run ``argv`` (after ``--``) with their ports in its environment, stop them;
    ``--usual-ports``: serve on the usual ports until Ctrl-C instead."""
    if argv == ["--usual-ports"]:
        return serve_on_usual_ports()
    command = argv[argv.index("--") + 1:] if "--" in argv else argv
    if not command or command[0].startswith("-"):
        print("usage: python -m tests.servers -- COMMAND [ARGS...]   (or --usual-ports)", file=sys.stderr)
        return 2
    scratch = _scratch_dir()
    try:
        return _run_with_servers(command, {"TMPDIR": str(scratch), "SPARK_LOCAL_DIRS": str(scratch)})
    finally:
        left = human_size(tree_size(scratch))
        shutil.rmtree(scratch, ignore_errors=True)
        print(f"test scratch: {left} left under {scratch}, removed", flush=True)


def _scratch_dir() -> Path:
    """One directory for every temporary file of the run, removed at its end.

    Spark's local directories (a cluster test's executors unpack the shipped Python archive into each),
    pytest's ``tmp_path``s, the servers' data and every ``tempfile`` go there, so a killed process's
    leftovers go with the run instead of filling the machine's /tmp over many runs.
    """
    scratch = Path(tempfile.mkdtemp(prefix="speedlayer-test-run-"))
    scratch.chmod(0o755)  # PostgreSQL runs as its own user and must reach its data directory
    tempfile.tempdir = str(scratch)
    return scratch


def _run_with_servers(command: list[str], env: dict[str, str]) -> int:
    def start(service: Service):
        try:
            return service, service.server().start()
        except local_servers.ServerError as exc:  # the tests that need it fail (CI) or skip with this line
            print(f"test servers: {exc}", file=sys.stderr)
            return service, None

    # One after another, from this thread: a server dies with the thread that started it.
    started = [(s, server) for s, server in map(start, ALL) if server is not None]
    try:
        env = {**os.environ, **env, **{service.env: str(server.port) for service, server in started}}
        print("test servers: " + ", ".join(f"{s.name} on {s.host}:{server.port}" for s, server in started), flush=True)
        return subprocess.call(command, env=env)
    finally:
        for _, server in started:
            server.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
