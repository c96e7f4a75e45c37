"""Private servers for the test suite, each on a free loopback port in a temporary directory of its own.

PostgreSQL, MariaDB and Redis come from Debian's packages, the Kafka broker from Maven Central's jars
(``tests/kafka/broker-pom.xml``, resolved into a Maven repository of their own); ``make test`` installs them all
(``tests/install_servers.sh``). Nothing here depends on a system service or on what another run left
behind: each server is initialised afresh, with the authentication the tests use (PostgreSQL's
``postgres`` and MariaDB's ``root``, both without a password, on loopback only).

Every process started here dies with the thread that started it (``PR_SET_PDEATHSIG``), so a test
run that is killed leaves no server behind; start them from a thread that lives as long as they should.

>>> with Postgres() as pg: print(pg.port)  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import ctypes
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from contextlib import closing
from pathlib import Path

from speedlayer.testing.cluster import free_port

ROOT = Path(__file__).resolve().parents[1]
KAFKA_POM = ROOT / "tests" / "kafka" / "broker-pom.xml"
#: the broker's classpath, written by ``mvn dependency:build-classpath`` on first use
KAFKA_CLASSPATH = ROOT / "build" / "kafka-broker.classpath"
#: the broker's jars: a Maven repository of their own, kept between runs, so that Maven's local repository
#: (~/.m2), where Spark's resolver looks first for the Kafka connector, holds nothing of the tests'
KAFKA_REPOSITORY = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "speedlayer-tests" / "m2"
_PR_SET_PDEATHSIG = 1


class ServerError(RuntimeError):
    """A server could not be started; the message says what is missing."""


def _die_with_parent(user: str | None = None):
    """A ``preexec_fn``: become ``user`` (when root), then ask the kernel to end this child with its parent.

    The death signal is set after the change of user because a change of credentials clears it.
    """
    def preexec() -> None:
        if user and os.geteuid() == 0:
            entry = pwd.getpwnam(user)
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    return preexec


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with closing(socket.create_connection((host, port), timeout=timeout)):
            return True
    except OSError:
        return False


class LocalServer:
    """One server process: ``start()`` prepares its directory, launches it and waits until it answers."""

    name = "server"
    #: the system user the server must run as when the tests run as root (PostgreSQL refuses root)
    user: str | None = None
    start_timeout_s = 60.0

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"speedlayer-{self.name.lower()}-"))
        self.process: subprocess.Popen | None = None
        self.log = self.dir / "server.log"

    # --- what each server says ----------------------------------------------------------------
    def prepare(self) -> None:
        """Initialise the data directory (run once, before the first start)."""

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        return port_open("127.0.0.1", self.port)

    # --- the shared life cycle --------------------------------------------------------------------
    def _run(self, args: list[str], timeout: float = 120) -> None:
        result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, preexec_fn=_die_with_parent(self.user))
        if result.returncode != 0:
            raise ServerError(f"{self.name}: {' '.join(args[:2])} failed (rc {result.returncode}): "
                              f"{(result.stderr or result.stdout).strip()[-800:]}")

    def _own_dir(self) -> None:
        if self.user and os.geteuid() == 0:
            entry = pwd.getpwnam(self.user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)

    def start(self, fresh: bool = True) -> LocalServer:
        if fresh:
            self._own_dir()
            self.prepare()
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                            preexec_fn=_die_with_parent(self.user), cwd=self.dir)
        deadline = time.monotonic() + self.start_timeout_s
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-1500:] if self.log.exists() else ""
                self.stop(remove=False)
                raise ServerError(f"{self.name} did not start on 127.0.0.1:{self.port}: {tail}")
            time.sleep(0.2)
        return self

    def stop(self, remove: bool = True) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if remove:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _postgres_bin(tool: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"))
    if not found:
        raise ServerError(f"PostgreSQL's {tool} is missing: apt-get install postgresql (make test does)")
    return found[-1]


class Postgres(LocalServer):
    """A PostgreSQL cluster of its own: user ``postgres`` trusted on loopback, durability off (tests only)."""

    name, user = "PostgreSQL", "postgres"

    def prepare(self) -> None:
        self._run([_postgres_bin("initdb"), "-D", str(self.dir / "data"), "-U", "postgres", "--auth=trust",
                   "--encoding=UTF8", "--no-sync", "--no-instructions"])

    def command(self) -> list[str]:
        return [_postgres_bin("postgres"), "-D", str(self.dir / "data"), "-p", str(self.port),
                "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.dir}",
                "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                "-c", "max_connections=200"]


class MariaDb(LocalServer):
    """A MariaDB server of its own: ``root`` without a password, on loopback."""

    name = "MariaDB"

    def prepare(self) -> None:
        if shutil.which("mariadb-install-db") is None:
            raise ServerError("MariaDB is missing: apt-get install mariadb-server (make test does)")
        self._run(["mariadb-install-db", "--no-defaults", f"--datadir={self.dir / 'data'}", "--user=root",
                   "--auth-root-authentication-method=normal", "--skip-test-db"])

    def command(self) -> list[str]:
        return ["mariadbd", "--no-defaults", f"--datadir={self.dir / 'data'}", "--user=root",
                f"--port={self.port}", "--bind-address=127.0.0.1", f"--socket={self.dir / 'mysqld.sock'}",
                f"--pid-file={self.dir / 'mysqld.pid'}", "--skip-name-resolve", "--skip-log-bin",
                "--innodb-flush-log-at-trx-commit=2", "--innodb-buffer-pool-size=128M", "--max-connections=300"]

    def ready(self) -> bool:
        if not port_open("127.0.0.1", self.port):
            return False
        self._grant_loopback_root()
        return True

    def _grant_loopback_root(self) -> None:
        """``--skip-name-resolve`` matches a TCP client from 127.0.0.1 by address: give ``root`` that host too."""
        import pymysql

        with closing(pymysql.connect(unix_socket=str(self.dir / "mysqld.sock"), user="root", password="")) as conn, \
                conn.cursor() as cur:
            cur.execute("CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''")
            cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")


class Redis(LocalServer):
    """A redis-server of its own; with ``appendonly`` its data survives ``restart()`` (an operator's SHUTDOWN)."""

    name = "Redis"

    def __init__(self, appendonly: bool = False, appendfsync: str = "everysec") -> None:
        super().__init__()
        self.appendonly, self.appendfsync = appendonly, appendfsync

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def prepare(self) -> None:
        if shutil.which("redis-server") is None:
            raise ServerError("redis-server is missing: apt-get install redis-server (make test does)")

    def command(self) -> list[str]:
        return ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir), "--save", "",
                "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", self.appendfsync]

    def _client(self):
        """A client that tries once (redis-py would otherwise retry a command the server closed on)."""
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        return redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))

    def ready(self) -> bool:
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
        self.start(fresh=False)


def _classpath_complete() -> bool:
    """Whether the recorded classpath exists and every jar on it is still there (a cache may have been cleaned)."""
    if not KAFKA_CLASSPATH.exists():
        return False
    return all(Path(jar).is_file() for jar in KAFKA_CLASSPATH.read_text().strip().split(os.pathsep) if jar)


def kafka_classpath() -> str:
    """The broker's classpath: Maven resolves it into ``KAFKA_REPOSITORY``, fetching from Maven Central only once."""
    if not _classpath_complete() or KAFKA_POM.stat().st_mtime > KAFKA_CLASSPATH.stat().st_mtime:
        KAFKA_CLASSPATH.parent.mkdir(exist_ok=True)
        if shutil.which("mvn") is None:
            raise ServerError("Maven is missing, and the Kafka broker's jars come through it: apt-get install maven")
        result = subprocess.run(["mvn", "-q", "-f", str(KAFKA_POM), f"-Dmaven.repo.local={KAFKA_REPOSITORY}",
                                 "dependency:build-classpath", f"-Dmdep.outputFile={KAFKA_CLASSPATH}"],
                                capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise ServerError(f"the Kafka broker's jars could not be resolved from Maven Central: {result.stdout[-800:]}")
    return KAFKA_CLASSPATH.read_text().strip()


class Kafka(LocalServer):
    """A single-node Apache Kafka 4 broker in KRaft mode (broker and controller in one process).

    Formatted with Kafka's own storage tool; topics are created by the tests (``auto.create.topics.enable``
    stays on, as on a broker installed with its defaults).
    """

    name = "Kafka"
    JVM = ["-Xms256m", "-Xmx768m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=240m",
           "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]

    def __init__(self) -> None:
        super().__init__()
        self.controller_port = free_port()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _java(self, main: str, *args: str) -> list[str]:
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
        return [java, *self.JVM, "-cp", kafka_classpath(), main, *args]

    def prepare(self) -> None:
        properties = self.dir / "server.properties"
        properties.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.bootstrap.servers=127.0.0.1:{self.controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={self.dir / 'logs'}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=4",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "transaction.state.log.num.partitions=4",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "delete.topic.enable=true",
        ]) + "\n")
        # A cluster id is a random UUID in Kafka's own base64 form (what `StorageTool random-uuid` prints);
        # joined with `=` because one in 64 starts with '-', which argparse would take for an option.
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self._run(self._java("kafka.tools.StorageTool", "format", "--standalone", f"--cluster-id={cluster_id}",
                             "-c", str(properties)))

    def command(self) -> list[str]:
        return self._java("kafka.Kafka", str(self.dir / "server.properties"))

    def ready(self) -> bool:
        if not port_open("127.0.0.1", self.port):
            return False
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        try:
            return bool(AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=2).brokers)
        except KafkaException:
            return False
