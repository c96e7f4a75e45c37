"""``postgresql://user:password@host:5432/db?table=NAME`` — upsert each output into a PostgreSQL table.

Each record batch goes in one transaction: Arrow writes it as CSV (in C++, no Python per row),
``COPY`` loads it into a session-local staging table, and one ``INSERT … SELECT … ON CONFLICT
(key) DO UPDATE`` (``DO NOTHING`` in append mode) moves it into the table. Identifiers are always
quoted by psycopg; values only travel through COPY. ``postgres://`` is accepted too.

    speedlayer run fleet --sink windows='postgresql://app:secret@db:5432/fleet?table=speed_windows'
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
from pyspark.sql import types as T

from speedlayer.core.errors import SinkError
from speedlayer.sinks.rejects import nul_rows
from speedlayer.sinks.sql import Column, Dialect, Server, SqlSink
from speedlayer.sinks.timeouts import GRACE_S, connect_s, cut_after, lock_timeout_lines

_TYPES = {
    "string": "text", "long": "bigint", "integer": "integer", "short": "smallint", "byte": "smallint",
    "double": "double precision", "float": "real", "boolean": "boolean", "date": "date",
    "timestamp": "timestamp with time zone", "timestamp_ntz": "timestamp without time zone",
}
_TIMESTAMPS = {"timestamp with time zone", "timestamp without time zone"}
_NUMERIC = {"numeric"}
#: phrases of connection failures that pass on their own (a FATAL at connect is otherwise permanent)
_PASSING = ("starting up", "shutting down", "recovery mode", "too many clients", "terminating connection")
#: SQLSTATE classes worth a retry: connection, transaction rollback, resources, operator intervention
_TRANSIENT_CLASSES = ("08", "40", "53", "57")
#: and: lock_not_available (lock_timeout), read_only_sql_transaction (a standby after a failover)
_TRANSIENT_STATES = ("55P03", "25006")
#: query_canceled (statement_timeout), lock_not_available (lock_timeout)
_TIMEOUT_STATES = ("57014", "55P03")
#: SQLSTATE classes that refuse a row's data: data exception (too long, bad value), integrity
#: (not null, another unique index, check); and 54000, e.g. a key above the btree index row limit
_REFUSED_CLASSES = ("22", "23")
_PROGRAM_LIMIT = "54000"
STAGE = "speedlayer_stage"


class PostgresDialect(Dialect):
    name = "PostgreSQL"
    module = "psycopg"
    extra = "postgres"
    default_port = 5432
    max_identifier = 63
    accepts = {
        "string": {"text", "character varying", "character", "varchar", "bpchar"},
        "long": {"bigint"} | _NUMERIC,
        "integer": {"integer", "bigint"} | _NUMERIC,
        "short": {"smallint", "integer", "bigint"} | _NUMERIC,
        "byte": {"smallint", "integer", "bigint"} | _NUMERIC,
        "double": {"double precision"} | _NUMERIC,
        "float": {"real", "double precision"} | _NUMERIC,
        "boolean": {"boolean"},
        "timestamp": _TIMESTAMPS,
        "timestamp_ntz": _TIMESTAMPS,
        "date": {"date"} | _TIMESTAMPS,
        "decimal": _NUMERIC,
    }

    def sql_type(self, spark: T.DataType, key: bool) -> str | None:
        if isinstance(spark, T.DecimalType):
            return f"numeric({spark.precision},{spark.scale})"
        return _TYPES.get(spark.typeName())

    def _ident(self, table: tuple[str, ...]):
        from psycopg import sql

        return sql.Identifier(*table)

    def quote(self, table: tuple[str, ...]) -> str:
        return ".".join('"' + part.replace('"', '""') + '"' for part in table)

    def connect(self, server: Server, statement_seconds: float) -> Any:
        import psycopg

        conn = psycopg.connect(host=server.host, port=server.port, dbname=server.database, user=server.user,
                               password=server.password, connect_timeout=connect_s(statement_seconds),
                               options=lock_timeout_lines(statement_seconds), application_name="speedlayer",
                               autocommit=True)
        conn.speedlayer_statement_s = statement_seconds  # the write's own bound on a silent server
        return conn

    def missing_database(self, error: BaseException) -> bool:
        text = str(error)
        return getattr(error, "sqlstate", None) == "3D000" or ("database" in text and "does not exist" in text)

    def create_database(self, server: Server) -> str:
        user = f" -U {server.user}" if server.user else ""
        return f"createdb -h {server.host} -p {server.port}{user} {server.database}"

    def transient(self, error: BaseException) -> bool:
        import psycopg

        if not isinstance(error, psycopg.Error):
            return isinstance(error, OSError)  # TimeoutError from cut_after included
        state = getattr(error, "sqlstate", None)
        if state:
            return state[:2] in _TRANSIENT_CLASSES or state in _TRANSIENT_STATES
        if not isinstance(error, (psycopg.OperationalError, psycopg.InterfaceError)):
            return False
        text = str(error)
        # A FATAL while connecting (no such database or role, auth failed) will not pass by waiting.
        return "FATAL:" not in text or any(p in text for p in _PASSING)

    def timed_out(self, error: BaseException) -> bool:
        return isinstance(error, TimeoutError) or getattr(error, "sqlstate", None) in _TIMEOUT_STATES

    def refusal(self, conn: Any, error: BaseException) -> str | None:
        import psycopg

        state = getattr(error, "sqlstate", None) if isinstance(error, psycopg.Error) else None
        if state and (state[:2] in _REFUSED_CLASSES or state == _PROGRAM_LIMIT):
            message = error.diag.message_primary or str(error)
            return f"PostgreSQL refused: {' '.join(message.split())}"
        return None

    def screen(self, conn: Any, batch: pa.RecordBatch) -> list[tuple[int, str]]:
        return list(nul_rows(batch))

    def columns_of(self, conn: Any, table: tuple[str, ...]) -> dict[str, str] | None:
        name = self._ident(table).as_string(conn)
        if conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is None:
            return None
        rows = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (name,)
        ).fetchall()
        return dict(rows)

    def unique_keys(self, conn: Any, table: tuple[str, ...]) -> list[set[str]]:
        rows = conn.execute(
            "SELECT array_agg(a.attname::text) FROM pg_index i "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND i.indpred IS NULL GROUP BY i.indexrelid",
            (self._ident(table).as_string(conn),),
        ).fetchall()
        return [set(cols) for (cols,) in rows]

    def check_access(self, conn: Any, table: tuple[str, ...]) -> None:
        name = self._ident(table).as_string(conn)
        if conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is not None:
            allowed = conn.execute("SELECT has_table_privilege(to_regclass(%s), 'INSERT')", (name,)).fetchone()[0]
            need = f"INSERT on table {self.quote(table)}"
        else:
            schema = table[0] if len(table) > 1 else conn.execute("SELECT current_schema()").fetchone()[0]
            if schema is None or conn.execute("SELECT to_regnamespace(%s)", (self.quote((schema,)),)).fetchone()[0] is None:
                raise SinkError(f"PostgreSQL schema {schema!r} does not exist: create it or write table=SCHEMA.NAME")
            allowed = conn.execute("SELECT has_schema_privilege(%s, 'CREATE')", (schema,)).fetchone()[0]
            need = f"CREATE in schema {self.quote((schema,))}"
        if not allowed:
            user = conn.execute("SELECT current_user").fetchone()[0]
            raise SinkError(f"PostgreSQL user {user!r} lacks {need}: GRANT it, or write elsewhere with ?table=")

    def create(self, conn: Any, table: tuple[str, ...], columns: list[Column]) -> None:
        from psycopg import sql

        defs = [sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.sql)) for c in columns]
        key = sql.SQL(", ").join(sql.Identifier(c.name) for c in columns if c.key)
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({}))").format(
            self._ident(table), sql.SQL(", ").join(defs), key))

    def has_rows(self, conn: Any, table: tuple[str, ...]) -> bool:
        from psycopg import sql

        return conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(self._ident(table))).fetchone()[0]

    def write(self, conn: Any, table: tuple[str, ...], columns: list[Column], upsert: bool, batch: pa.RecordBatch) -> None:
        from psycopg import sql

        names = sql.SQL(", ").join(sql.Identifier(c.name) for c in columns)
        stage = sql.Identifier(STAGE)
        updates = [sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c.name)) for c in columns if not c.key]
        conflict = (sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(updates)) if upsert and updates
                    else sql.SQL("DO NOTHING"))
        key = sql.SQL(", ").join(sql.Identifier(c.name) for c in columns if c.key)
        # Three statements, each bounded by the server; past that, the server is not answering at all.
        bound = 3 * getattr(conn, "speedlayer_statement_s", 60.0) + GRACE_S
        with cut_after(bound, conn.fileno()) as cut:
            try:
                self._move(conn, table, names, stage, key, conflict, batch)
            except Exception:
                if cut.is_set():
                    raise TimeoutError(f"no answer from the server within {bound:g}s") from None
                raise

    def _move(self, conn: Any, table: tuple[str, ...], names: Any, stage: Any, key: Any, conflict: Any,
              batch: pa.RecordBatch) -> None:
        from psycopg import sql

        with conn.transaction():
            # The table's types for our columns only (no constraints: the table's own apply on INSERT).
            conn.execute(sql.SQL("CREATE TEMP TABLE IF NOT EXISTS {} ON COMMIT DELETE ROWS AS SELECT {} FROM {} WITH NO DATA")
                         .format(stage, names, self._ident(table)))
            with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(stage, names)) as copy:
                copy.write(memoryview(arrow_csv(batch)))
            conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT ({}) {}").format(
                self._ident(table), names, names, stage, key, conflict))


def arrow_csv(batch: pa.RecordBatch) -> pa.Buffer:
    """A record batch as headerless CSV the way COPY reads it: NULL unquoted-empty, text always quoted.

    >>> bytes(arrow_csv(pa.record_batch({"s": ["a", "", None], "x": [1.5, None, 2.0]})))
    b'"a",1.5\\n"",\\n,2\\n'
    """
    arrays = [_copyable(a) for a in batch.columns]
    out = pa.BufferOutputStream()
    pa_csv.write_csv(pa.Table.from_arrays(arrays, names=batch.schema.names), out,
                     pa_csv.WriteOptions(include_header=False))
    return out.getvalue()


def _copyable(array: pa.Array) -> pa.Array:
    """Timestamps in UTC (rows with a NUL in text are refused before, by ``nul_rows``).

    >>> import datetime as dt
    >>> _copyable(pa.array([dt.datetime(2026, 1, 1, 10)], pa.timestamp("us", "Europe/Berlin"))).type
    TimestampType(timestamp[us, tz=UTC])
    """
    if pa.types.is_timestamp(array.type) and array.type.tz:
        return array.cast(pa.timestamp(array.type.unit, "UTC"))
    return array


class PostgresSink(SqlSink):
    scheme = "postgresql"
    summary = "a PostgreSQL table, upserted by the output's key in one transaction per batch"
    aliases = ("postgres",)
    dialect = PostgresDialect()
