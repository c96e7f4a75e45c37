"""Every database call is bounded by retry_for: a held lock or a stalled network fails the write in
bounded time with one line, and a lock released in time lets the write finish with every row."""

from __future__ import annotations

import threading
import time
from contextlib import closing

import psycopg
import pymysql
import pytest

from speedlayer.core.errors import SinkError
from speedlayer.sinks import open_sink
from tests import servers
from tests.sinks.common import ALERTS_SCHEMA, alerts_frame, target
from tests.sinks.tcp_proxy import TcpProxy

#: the old code waited for a held lock for good: the tests release it after this long so that they end
SAFETY_RELEASE_S = 45.0


class Postgres:
    name, server = "PostgreSQL", servers.POSTGRES

    def __init__(self, url: str):
        self.url = url

    def hold_lock(self, table: str):
        holder = psycopg.connect(self.url)
        holder.execute(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE')  # psycopg opened a transaction
        return holder

    def still_held(self, holder, table: str) -> bool:
        with psycopg.connect(self.url) as other:
            return other.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND relation = to_regclass(%s) "
                                 "AND mode = 'AccessExclusiveLock' AND granted",
                                 (holder.info.backend_pid, table)).fetchone()[0] == 1

    def release(self, holder) -> None:
        holder.rollback()
        holder.close()

    def keys(self, table: str) -> list[str]:
        with psycopg.connect(self.url) as conn:
            return sorted(r[0] for r in conn.execute(f'SELECT event_id FROM "{table}"').fetchall())


class MariaDb:
    name, server = "MySQL", servers.MARIADB

    def __init__(self, url: str):
        self.url = url
        self.database = url.rsplit("/", 1)[1]

    def _connect(self):
        return pymysql.connect(host=self.server.host, port=self.server.port, user="root", password="", database=self.database)

    def hold_lock(self, table: str):
        holder = self._connect()
        with holder.cursor() as cur:
            cur.execute(f"LOCK TABLES `{table}` WRITE")
        return holder

    def still_held(self, holder, table: str) -> bool:
        with closing(self._connect()) as other, other.cursor() as cur:
            cur.execute("SET SESSION lock_wait_timeout = 1")
            try:
                cur.execute(f"SELECT count(*) FROM `{table}`")
            except pymysql.err.OperationalError as exc:
                return exc.args[0] == 1205  # Lock wait timeout exceeded
            return False

    def release(self, holder) -> None:
        with holder.cursor() as cur:
            cur.execute("UNLOCK TABLES")
        holder.close()

    def keys(self, table: str) -> list[str]:
        with closing(self._connect()) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT event_id FROM `{table}`")
            return sorted(r[0] for r in cur.fetchall())


@pytest.fixture(params=["postgres", "mariadb"])
def db(request):
    if request.param == "postgres":
        return Postgres(request.getfixturevalue("postgres_url"))
    return MariaDb(request.getfixturevalue("mysql_url"))


def expected_keys(n: int, first: int = 0) -> list[str]:
    return [f"e-{i:06d}" for i in range(first, first + n)]  # as alerts_frame names them


def test_a_held_lock_fails_the_write_in_bounded_time_with_one_line(spark, db):
    write = open_sink(f"{db.url}?retry_for=3s").batch_function(ALERTS_SCHEMA, target("alerts"))  # creates the table
    holder = db.hold_lock("alerts")
    safety = threading.Timer(SAFETY_RELEASE_S, db.release, (holder,))
    safety.start()
    started = time.monotonic()
    try:
        with pytest.raises(SinkError) as err:
            # One partition: with two, the task that did not fail could still commit once the lock is released.
            write(alerts_frame(spark, 50).coalesce(1), 0)
        elapsed = time.monotonic() - started
        assert db.still_held(holder, "alerts")  # the lock was held all along the write
    finally:
        safety.cancel()
        db.release(holder)
    message = str(err.value)
    assert 3.0 <= elapsed < 3.0 + 20, elapsed  # retried until retry_for, then gave up
    assert message.startswith(f"{db.name} at 127.0.0.1:{db.server.port}/") and " kept timing out for " in message, message
    assert "(retry_for=3s)" in message and "hold a lock" in message and "\n" not in message
    assert db.keys("alerts") == []


def test_a_lock_released_in_time_lets_the_write_finish_with_every_row(spark, db):
    write = open_sink(f"{db.url}?retry_for=9s").batch_function(ALERTS_SCHEMA, target("alerts"))  # 3 s per statement
    holder = db.hold_lock("alerts")
    release = threading.Timer(4.0, db.release, (holder,))  # after the first try timed out
    release.start()
    started = time.monotonic()
    write(alerts_frame(spark, 50), 0)
    elapsed = time.monotonic() - started
    release.join()
    assert elapsed >= 4.0  # it waited for the lock
    assert db.keys("alerts") == expected_keys(50)


def test_a_stalled_network_fails_the_write_in_bounded_time(spark, db):
    marker = b"COPY" if isinstance(db, Postgres) else b"INSERT INTO"
    with TcpProxy((db.server.host, db.server.port)) as proxy:
        url = db.url.replace(f":{db.server.port}/", f":{proxy.port}/")
        write = open_sink(f"{url}?retry_for=3s").batch_function(ALERTS_SCHEMA, target("alerts"))
        proxy.stall_on(marker)  # connections open, statements go out, nothing comes back
        safety = threading.Timer(SAFETY_RELEASE_S, proxy.unstall)
        safety.start()
        started = time.monotonic()
        try:
            with pytest.raises(SinkError) as err:
                write(alerts_frame(spark, 50), 0)
        finally:
            safety.cancel()
        elapsed = time.monotonic() - started
    assert proxy.stalls >= 1
    assert 3.0 <= elapsed < 3.0 + 25, elapsed
    message = str(err.value)
    assert message.startswith(f"{db.name} at 127.0.0.1:{proxy.port}/") and "kept timing out" in message, message
    assert "\n" not in message


def test_postgres_read_only_after_a_failover_is_waited_for(spark, postgres_url):
    write = open_sink(f"{postgres_url}?retry_for=30s").batch_function(ALERTS_SCHEMA, target("alerts"))
    database = postgres_url.rsplit("/", 1)[1]
    admin = postgres_url.rsplit("/", 1)[0] + "/postgres"

    def read_only(on: bool) -> None:  # new sessions of this database only: nothing else sees it
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{database}" SET default_transaction_read_only = {"on" if on else "off"}')

    read_only(True)
    # the fault is real: a write is refused
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction), psycopg.connect(postgres_url) as conn:
        conn.execute("INSERT INTO alerts (event_id) VALUES ('x')")
    writable = threading.Timer(2.0, read_only, (False,))
    writable.start()
    started = time.monotonic()
    write(alerts_frame(spark, 30), 0)
    writable.join()
    assert time.monotonic() - started >= 2.0
    assert Postgres(postgres_url).keys("alerts") == expected_keys(30)


@pytest.mark.parametrize("code", [1290, 1836, 1792])
def test_mysql_read_only_errors_are_transient(code):
    from speedlayer.sinks.mysql import MySqlDialect

    error = pymysql.err.OperationalError(code, "The MariaDB server is running with the --read-only option")
    assert MySqlDialect().transient(error)
