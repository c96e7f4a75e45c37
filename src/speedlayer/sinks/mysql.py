"""``mysql://user:password@host:3306/db?table=NAME`` — upsert each output into a MySQL or MariaDB table.

Each record batch goes in one transaction as multi-row ``INSERT … ON DUPLICATE KEY UPDATE``
statements of up to 1 MB (``key = key`` in append mode: a replayed row is skipped, and unlike
``INSERT IGNORE`` no other error is hidden). Values are escaped by PyMySQL, identifiers quoted
with backticks. Timestamps are stored as UTC in ``DATETIME(6)`` (the session runs at ``+00:00``);
key strings are ``VARCHAR(255)`` with a binary collation, so keys compare exactly as in Spark.

    speedlayer run fleet --sink windows='mysql://app:secret@db:3306/fleet?table=speed_windows'
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from speedlayer.sinks.sql import Column, Dialect, Server, SqlSink
from speedlayer.sinks.timeouts import GRACE_S, connect_s

_TYPES = {
    "string": "LONGTEXT", "long": "BIGINT", "integer": "INT", "short": "SMALLINT", "byte": "TINYINT",
    "double": "DOUBLE", "float": "FLOAT", "boolean": "BOOLEAN", "date": "DATE",
    "timestamp": "DATETIME(6)", "timestamp_ntz": "DATETIME(6)",
}
_INTS = ["tinyint", "smallint", "mediumint", "int", "bigint", "decimal"]
_TIMES = {"datetime", "timestamp"}
#: server errors that pass on their own: can't connect, gone away, lost, too many connections,
#: shutdown in progress, lock wait timeout, deadlock, connection killed, disconnected for inactivity
_TRANSIENT = {2002, 2003, 2006, 2013, 2055, 1040, 1053, 1205, 1213, 1927, 4031,
              # statement timeouts (MariaDB max_statement_time, MySQL max_execution_time); read-only
              # after a failover (--read-only, read-only mode, read-only transaction)
              1969, 3024, 1290, 1836, 1792}
#: lock wait timeout, statement timeouts
_TIMEOUTS = {1205, 1969, 3024}
#: server errors that refuse the data of a row (too long, out of range, bad date or string, null,
#: another unique key, foreign key, check constraint): that row is a dead letter, the rest is written
_REFUSED = {1048, 1062, 1264, 1265, 1292, 1366, 1367, 1406, 1411, 1452, 1525, 1690, 3819, 4025}
#: longest INSERT statement sent at once (servers allow at least 4 MB by default)
MAX_STATEMENT_BYTES = 1_000_000
#: bytes of a statement besides its rows' values (the INSERT's head and tail), kept free under max_allowed_packet
_STATEMENT_ROOM = 64_000


class RowTooLarge(ValueError):
    """A row whose INSERT would exceed the server's max_allowed_packet (the server would drop the connection)."""


class MySqlDialect(Dialect):
    name = "MySQL"
    module = "pymysql"
    extra = "mysql"
    default_port = 3306
    max_identifier = 64
    accepts = {
        "string": {"varchar", "char", "text", "tinytext", "mediumtext", "longtext"},
        "long": {"bigint", "decimal"},
        "integer": set(_INTS[3:]),
        "short": set(_INTS[1:]),
        "byte": set(_INTS),
        "double": {"double", "decimal"},
        "float": {"float", "double", "decimal"},
        "boolean": {"tinyint", "bit"},
        "timestamp": _TIMES,
        "timestamp_ntz": _TIMES,
        "date": {"date"} | _TIMES,
        "decimal": {"decimal"},
    }

    def sql_type(self, spark: T.DataType, key: bool) -> str | None:
        if isinstance(spark, T.DecimalType):
            return f"DECIMAL({spark.precision},{spark.scale})"
        if key and isinstance(spark, T.StringType):
            return "VARCHAR(255)"  # TEXT cannot be a primary key
        return _TYPES.get(spark.typeName())

    def quote(self, table: tuple[str, ...]) -> str:
        return ".".join("`" + part.replace("`", "``") + "`" for part in table)

    def fold(self, name: str) -> str:
        return name.lower()

    def connect(self, server: Server, statement_seconds: float) -> Any:
        import pymysql

        wait = statement_seconds + GRACE_S  # past the server's own bounds: the network stalls
        conn = pymysql.connect(host=server.host, port=server.port, user=server.user, password=server.password or "",
                               database=server.database, connect_timeout=connect_s(statement_seconds), charset="utf8mb4",
                               autocommit=False, read_timeout=wait, write_timeout=wait)
        locks = max(1, math.ceil(statement_seconds))
        with conn.cursor() as cur:
            cur.execute(f"SET time_zone = '+00:00', lock_wait_timeout = {locks}, innodb_lock_wait_timeout = {locks}")
            if "MariaDB" in (conn.get_server_info() or ""):  # MySQL's max_execution_time bounds SELECTs only
                cur.execute(f"SET max_statement_time = {statement_seconds:g}")
        return conn

    def timed_out(self, error: BaseException) -> bool:
        import pymysql

        if isinstance(error, pymysql.err.MySQLError) and error.args:
            return error.args[0] in _TIMEOUTS or (error.args[0] == 2013 and "timed out" in str(error))
        return isinstance(error, TimeoutError)

    def refusal(self, conn: Any, error: BaseException) -> str | None:
        import pymysql

        server = "MariaDB" if "MariaDB" in (conn.get_server_info() or "") else "MySQL"
        if isinstance(error, RowTooLarge):
            return f"{server} refused: {error}"
        if isinstance(error, pymysql.err.MySQLError) and len(error.args) > 1 and error.args[0] in _REFUSED:
            return f"{server} refused: {' '.join(str(error.args[1]).split())}"
        return None

    def screen(self, conn: Any, batch: pa.RecordBatch) -> list[tuple[int, str]]:
        return list(non_finite_rows(batch))

    def missing_database(self, error: BaseException) -> bool:
        return bool(getattr(error, "args", None)) and error.args[0] == 1049  # ER_BAD_DB_ERROR: Unknown database

    def create_database(self, server: Server) -> str:
        return f"CREATE DATABASE `{server.database}`"

    def transient(self, error: BaseException) -> bool:
        import pymysql

        if isinstance(error, pymysql.err.InterfaceError):  # the connection is already closed
            return True
        if isinstance(error, (pymysql.err.OperationalError, pymysql.err.InternalError)):
            return bool(error.args) and error.args[0] in _TRANSIENT
        return isinstance(error, OSError)

    def _where(self, table: tuple[str, ...]) -> tuple[str | None, str]:
        return (table[0], table[1]) if len(table) == 2 else (None, table[0])

    def columns_of(self, conn: Any, table: tuple[str, ...]) -> dict[str, str] | None:
        with conn.cursor() as cur:
            cur.execute("SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS "
                        "WHERE TABLE_SCHEMA = COALESCE(%s, DATABASE()) AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
                        self._where(table))
            rows = cur.fetchall()
        return dict(rows) if rows else None

    def unique_keys(self, conn: Any, table: tuple[str, ...]) -> list[set[str]]:
        with conn.cursor() as cur:
            cur.execute("SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
                        "WHERE TABLE_SCHEMA = COALESCE(%s, DATABASE()) AND TABLE_NAME = %s AND NON_UNIQUE = 0",
                        self._where(table))
            indexes: dict[str, set[str]] = {}
            for index, column in cur.fetchall():
                indexes.setdefault(index, set()).add(column)
        return list(indexes.values())

    def create(self, conn: Any, table: tuple[str, ...], columns: list[Column]) -> None:
        defs = ", ".join(f"{self.quote((c.name,))} {c.sql}" for c in columns)
        key = ", ".join(self.quote((c.name,)) for c in columns if c.key)
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE IF NOT EXISTS {self.quote(table)} ({defs}, PRIMARY KEY ({key})) "
                        "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin")
        conn.commit()

    def has_rows(self, conn: Any, table: tuple[str, ...]) -> bool:
        with conn.cursor() as cur:
            cur.execute(f"SELECT 1 FROM {self.quote(table)} LIMIT 1")
            return cur.fetchone() is not None

    def write(self, conn: Any, table: tuple[str, ...], columns: list[Column], upsert: bool, batch: pa.RecordBatch) -> None:
        q = lambda name: self.quote((name,))  # noqa: E731
        head = f"INSERT INTO {self.quote(table)} ({', '.join(q(c.name) for c in columns)}) VALUES "
        updates = [f"{q(c.name)} = VALUES({q(c.name)})" for c in columns if not c.key]
        if not (upsert and updates):
            first_key = q(next(c.name for c in columns if c.key))
            updates = [f"{first_key} = {first_key}"]  # keep the stored row; other errors still raise
        tail = " ON DUPLICATE KEY UPDATE " + ", ".join(updates)
        packet = max_packet(conn)
        try:
            with conn.cursor() as cur:
                # No arguments are passed, so '%' in identifiers needs no escaping.
                for values in value_lists(conn, python_rows(batch), packet):
                    cur.execute(head + values + tail)
            conn.commit()
        except Exception:
            try:
                conn.rollback()
            except Exception:  # noqa: BLE001 — the connection may be gone; the error below says why
                pass
            raise


def python_rows(batch: pa.RecordBatch) -> list[tuple]:
    """The rows of a record batch as tuples; timestamps become naive UTC datetimes for DATETIME.

    >>> import datetime as dt
    >>> ts = pa.array([dt.datetime(2026, 1, 1, 10)], pa.timestamp("us", "Europe/Berlin"))
    >>> python_rows(pa.record_batch({"t": ts, "n": [1]}))
    [(datetime.datetime(2026, 1, 1, 10, 0), 1)]
    """
    columns = []
    for array in batch.columns:
        if pa.types.is_timestamp(array.type) and array.type.tz:
            array = array.cast(pa.timestamp(array.type.unit))  # drops the zone, keeps the UTC value
        columns.append(array.to_pylist())
    return list(zip(*columns))


def max_packet(conn: Any) -> int:
    """The server's max_allowed_packet, asked once per connection."""
    if not hasattr(conn, "speedlayer_max_packet"):
        with conn.cursor() as cur:
            cur.execute("SELECT @@max_allowed_packet")
            conn.speedlayer_max_packet = int(cur.fetchone()[0])
    return conn.speedlayer_max_packet


def non_finite_rows(batch: pa.RecordBatch) -> Iterator[tuple[int, str]]:
    """Rows with NaN or infinity in a floating-point column: MySQL's DOUBLE cannot store them.

    >>> list(non_finite_rows(pa.record_batch({"x": [1.0, float("nan"), None]})))
    [(1, "column 'x' is NaN or infinite, which MySQL cannot store")]
    """
    found: dict[int, str] = {}
    for name, array in zip(batch.schema.names, batch.columns):
        if pa.types.is_floating(array.type):
            bad = pc.fill_null(pc.invert(pc.is_finite(array)), False)
            for row in pc.indices_nonzero(bad).to_pylist():
                found.setdefault(row, f"column {name!r} is NaN or infinite, which MySQL cannot store")
    return iter(sorted(found.items()))


def value_lists(conn: Any, rows: list[tuple], max_packet_bytes: int = 16 << 20) -> Iterator[str]:
    """``(…),(…)`` lists of escaped rows, each under ``MAX_STATEMENT_BYTES`` and the server's packet limit.

    A row too large for any statement raises RowTooLarge before anything is sent: the server would
    drop the connection, which would look like a lost server and be retried in vain.
    """
    room = min(_STATEMENT_ROOM, max_packet_bytes // 4)  # for the INSERT's head and tail
    cap = min(MAX_STATEMENT_BYTES, max_packet_bytes - room)
    literal, parts, size = conn.literal, [], 0
    texts = ["(" + ",".join(literal(v) for v in row) + ")" for row in rows]
    for text in texts:
        if len(text) * 4 > max_packet_bytes - room and len(text.encode()) > max_packet_bytes - room:
            raise RowTooLarge(f"row is {len(text.encode())} bytes as SQL, too large for max_allowed_packet "
                              f"({max_packet_bytes} bytes)")
    for text in texts:
        if parts and size + len(text) > cap:
            yield ",".join(parts)
            parts, size = [], 0
        parts.append(text)
        size += len(text) + 1
    if parts:
        yield ",".join(parts)


class MySqlSink(SqlSink):
    scheme = "mysql"
    summary = "a MySQL or MariaDB table, upserted by the output's key in one transaction per batch"
    aliases = ("mariadb",)
    dialect = MySqlDialect()
