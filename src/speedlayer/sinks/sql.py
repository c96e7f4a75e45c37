"""What the PostgreSQL and MySQL sinks share: options, tables from Spark schemas, upsert by key.

An output is written into one table whose primary key is the output's key (``Target.key``:
window + vehicle for windows, ``event_id`` for alerts, ``offset`` for dead letters). Every write
is an ``INSERT`` that resolves a conflict on that key, so writing a batch twice leaves the table as
writing it once: that is the exactly-once guarantee, and it needs no transaction spanning the
batch. In ``update`` and ``complete`` mode a conflicting row is overwritten (a window's newer
value wins); in ``append`` mode each key arrives once and a conflict can only be a replay, so the
stored row is kept.

A dialect module (``postgres.py``, ``mysql.py``) supplies the SQL: types, introspection, the bulk
write and which errors are transient. The dialect object travels to the executors, so it holds
nothing but settings and imports its client library where it uses it.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa
from pydantic import Field
from pyspark.sql import types as T

from speedlayer.core.durations import parse_duration
from speedlayer.core.errors import ConfigError, SinkError
from speedlayer.core.modes import APPEND, COMPLETE, UPDATE
from speedlayer.core.uris import Uri, parse_options
from speedlayer.sinks.base import EXACTLY_ONCE, Sink, Target
from speedlayer.sinks.batches import BatchFunction, Connector, RetryOptions, one_line, require
from speedlayer.sinks.timeouts import statement_s, timeout_hint


class SqlOptions(RetryOptions):
    table: str | None = Field(None, description="table to write, optionally schema.table; default: the output name")


@dataclass(frozen=True)
class Server:
    """Where to connect. The password stays out of ``repr`` and of every message."""

    host: str
    port: int
    database: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Column:
    """One column of the table: its name, the Spark type it holds, the SQL type it is created with."""

    name: str
    spark: T.DataType
    sql: str
    key: bool


class Dialect(ABC):
    """The SQL of one database family. Stateless and picklable."""

    name: ClassVar[str]          # "PostgreSQL"
    module: ClassVar[str]        # client library, imported where used
    extra: ClassVar[str]         # pip extra that installs it
    default_port: ClassVar[int]
    max_identifier: ClassVar[int]
    #: Spark type name -> normalised SQL type names an existing column may have
    accepts: ClassVar[dict[str, set[str]]]

    @abstractmethod
    def sql_type(self, spark: T.DataType, key: bool) -> str | None:
        """The SQL type a column of this Spark type is created with (None: not storable)."""

    @abstractmethod
    def quote(self, table: tuple[str, ...]) -> str:
        """The quoted (optionally schema-qualified) table name, for DDL and messages."""

    @abstractmethod
    def connect(self, server: Server, statement_seconds: float) -> Any:
        """A connection whose every statement and lock wait is bounded by ``statement_seconds`` (timeouts.py)."""

    @abstractmethod
    def transient(self, error: BaseException) -> bool: ...

    def timed_out(self, error: BaseException) -> bool:
        """Whether ``error`` is a statement, lock or network timeout."""
        return isinstance(error, TimeoutError)

    @abstractmethod
    def columns_of(self, conn: Any, table: tuple[str, ...]) -> dict[str, str] | None:
        """Existing columns {name: SQL type}, or None when the table does not exist."""

    @abstractmethod
    def unique_keys(self, conn: Any, table: tuple[str, ...]) -> list[set[str]]:
        """The column sets of the table's primary key and unique indexes."""

    @abstractmethod
    def create(self, conn: Any, table: tuple[str, ...], columns: list[Column]) -> None: ...

    @abstractmethod
    def has_rows(self, conn: Any, table: tuple[str, ...]) -> bool: ...

    @abstractmethod
    def write(self, conn: Any, table: tuple[str, ...], columns: list[Column], upsert: bool, batch: pa.RecordBatch) -> None:
        """Insert a record batch in one transaction; on a key conflict overwrite (upsert) or keep the row."""

    def refusal(self, conn: Any, error: BaseException) -> str | None:
        """The one-line reason when ``error`` refuses the data itself (too long, out of range); else None."""
        return None

    def screen(self, conn: Any, batch: pa.RecordBatch) -> list[tuple[int, str]]:
        """Rows this database is known to refuse, found before sending them: ``[(row, reason)]``."""
        return []

    def check_access(self, conn: Any, table: tuple[str, ...]) -> None:
        """Fail (SinkError) when the user may not create or insert into ``table``."""

    def missing_database(self, error: BaseException) -> bool:
        """Whether a failed connection says the server is up but has no such database."""
        return False

    def create_database(self, server: Server) -> str:
        """The statement that creates the URI's database, for the line that says to."""
        return f"CREATE DATABASE {server.database}"

    def fold(self, name: str) -> str:
        """How the database compares column names (MySQL ignores case)."""
        return name


def normalise_type(sql_type: str) -> str:
    """``'timestamp(3) with time zone'`` -> ``'timestamp with time zone'``; ``'VARCHAR(255)'`` -> ``'varchar'``.

    >>> normalise_type("character varying(255)"), normalise_type("numeric(10,2)")
    ('character varying', 'numeric')
    """
    return " ".join(re.sub(r"\([^)]*\)", "", sql_type.lower()).split())


def table_name(text: str, dialect: Dialect) -> tuple[str, ...]:
    """``'w'`` -> ``('w',)``; ``'fleet.w'`` -> ``('fleet', 'w')`` (schema or database, then table).

    >>> from speedlayer.sinks.postgres import PostgresDialect
    >>> table_name("fleet.windows", PostgresDialect())
    ('fleet', 'windows')
    """
    parts = tuple(text.split(".", 1))
    for part in parts:
        if not part or "\x00" in part or len(part.encode()) > dialect.max_identifier:
            raise ConfigError(f"{dialect.name} table name {text!r} is not valid: each part must be 1 to "
                              f"{dialect.max_identifier} bytes (write table=name or table=schema.name)")
    return parts


def table_columns(schema: T.StructType, key: tuple[str, ...], dialect: Dialect, output: str) -> list[Column]:
    """The table's columns for an output's Spark schema; key columns must exist.

    >>> from speedlayer.sinks.postgres import PostgresDialect
    >>> s = T.StructType([T.StructField("event_id", T.StringType()), T.StructField("speed", T.DoubleType())])
    >>> [(c.name, c.sql) for c in table_columns(s, ("event_id",), PostgresDialect(), "alerts")]
    [('event_id', 'text'), ('speed', 'double precision')]
    """
    names = [f.name for f in schema.fields]
    missing = [k for k in key if k not in names]
    if missing:
        raise SinkError(f"output {output!r} has no column {missing[0]!r} of its key ({', '.join(key)})")
    columns = []
    for f in schema.fields:
        sql_type = dialect.sql_type(f.dataType, f.name in key)
        if sql_type is None:
            raise SinkError(f"output {output!r} column {f.name!r} has type {f.dataType.simpleString()}, which the "
                            f"{dialect.name} sink cannot store: cast it in the pipeline (e.g. to_json for a struct)")
        columns.append(Column(f.name, f.dataType, sql_type, f.name in key))
    return columns


def ensure_table(dialect: Dialect, conn: Any, table: tuple[str, ...], columns: list[Column], output: str) -> None:
    """Create the table with a primary key on the key columns, or check that the existing one fits."""
    existing = dialect.columns_of(conn, table)
    if existing is None:
        dialect.create(conn, table, columns)
        return
    shown = dialect.quote(table)
    have = {dialect.fold(name): sql_type for name, sql_type in existing.items()}
    for col in columns:
        actual = have.get(dialect.fold(col.name))
        if actual is None:
            raise SinkError(f"table {shown} has no column {col.name!r}, which output {output!r} writes: "
                            f"add it ({col.sql}) or write to another table with ?table=NAME")
        if normalise_type(actual) not in dialect.accepts[col.spark.typeName()]:
            raise SinkError(f"table {shown} column {col.name!r} is {actual}, but output {output!r} writes "
                            f"{col.spark.simpleString()} values ({col.sql}): "
                            "alter the column or write to another table with ?table=NAME")
    key = {dialect.fold(c.name) for c in columns if c.key}
    if not any({dialect.fold(n) for n in cols} == key for cols in dialect.unique_keys(conn, table)):
        names = ", ".join(c.name for c in columns if c.key)
        raise SinkError(f"table {shown} has no primary key or unique index on ({names}), so rows cannot be "
                        f"upserted by key: add one, or write to another table with ?table=NAME")


@dataclass
class SqlConnector(Connector):
    """Writes record batches into one table (pickled to the executors)."""

    dialect: Dialect
    server: Server
    table: tuple[str, ...]
    columns: list[Column]
    upsert: bool
    retry_for_s: float = 120.0

    @property
    def what(self) -> str:  # type: ignore[override]
        return f"{self.dialect.name} at {self.server.host}:{self.server.port}/{self.server.database}"

    @property
    def secret(self) -> str | None:  # type: ignore[override]
        return self.server.password

    def connect(self) -> Any:
        return self.dialect.connect(self.server, statement_s(self.retry_for_s))

    def write(self, conn: Any, batch: pa.RecordBatch, batch_id: int, first_index: int) -> None:
        self.dialect.write(conn, self.table, self.columns, self.upsert, batch)

    def transient(self, error: BaseException) -> bool:
        return self.dialect.transient(error)

    def refusal(self, conn: Any, error: BaseException) -> str | None:
        return self.dialect.refusal(conn, error)

    def screen(self, conn: Any, batch: pa.RecordBatch) -> list[tuple[int, str]]:
        return self.dialect.screen(conn, batch)

    def timed_out(self, error: BaseException) -> str | None:
        return timeout_hint(self.what, statement_s(self.retry_for_s)) if self.dialect.timed_out(error) else None


class SqlSink(Sink):
    """A table per output, upserted by the output's key (see the module docstring)."""

    guarantee = EXACTLY_ONCE
    modes = (APPEND, UPDATE, COMPLETE)
    writes_batches = True
    dialect: ClassVar[Dialect]

    def __init__(self, uri: Uri):
        super().__init__(uri)
        d = self.dialect
        self.options: SqlOptions = parse_options(SqlOptions, uri.options, f"{uri.scheme}://")
        require(d.module, d.extra, d.name)
        database = uri.path.strip("/")
        if not database or "/" in database:
            raise ConfigError(f"{uri.display} names no database: write {uri.scheme}://user:password@host:{d.default_port}/DATABASE?table=NAME")
        self.server = Server(uri.host or "localhost", uri.port or d.default_port, database, uri.username, uri.password)
        self.retry_for_s = parse_duration(self.options.retry_for, "retry_for") / 1000
        self.explicit_table = table_name(self.options.table, d) if self.options.table else None

    @property
    def what(self) -> str:
        return f"{self.dialect.name} at {self.server.host}:{self.server.port}/{self.server.database}"

    def table_for(self, output: str) -> tuple[str, ...]:
        """The table an output goes to: ``?table=`` or the output name with '-' as '_'."""
        return self.explicit_table or table_name(output.replace("-", "_"), self.dialect)

    def destination(self, job: str, output: str) -> tuple | None:
        s = self.server
        return (f"{self.dialect.name} table", s.host, s.port, s.database, self.table_for(output))

    @contextmanager
    def connected(self) -> Iterator[Any]:
        """A connection from the driver; an unreachable server is a one-line SinkError."""
        try:
            conn = self.dialect.connect(self.server, statement_s(self.retry_for_s))
        except Exception as exc:  # noqa: BLE001 — any failure to connect is reported the same way
            s = self.server
            if self.dialect.missing_database(exc):
                raise SinkError(f"{self.dialect.name} at {s.host}:{s.port} has no database {s.database!r}: create it "
                                f"({self.dialect.create_database(s)}) or name another in the URI") from None
            raise SinkError(f"cannot reach {self.what}: {one_line(exc, s.password)}; "
                            "start the server or fix the URI") from None
        try:
            yield conn
        except SinkError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise SinkError(f"{self.what}: {one_line(exc, self.server.password)}") from None
        finally:
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass

    def check(self, output_name: str, fresh_checkpoint: bool) -> None:
        # The table is created in start(), once the output's schema is known; here: reachable, and allowed.
        with self.connected() as conn:
            self.dialect.check_access(conn, self.table_for(output_name))

    def batch_function(self, schema: T.StructType, target: Target) -> BatchFunction:
        """Create or check the table, then give the ``foreachBatch`` function that fills it.

        >>> write = sink.batch_function(df.schema, Target("fleet", "windows", "q", key=("window_start",)))  # doctest: +SKIP
        >>> write(batch_df, 0)                                                                     # doctest: +SKIP
        """
        if not target.key:
            raise SinkError(f"output {target.output!r} names no key columns, and the {self.dialect.name} sink "
                            "writes by key: use a sink without keys (parquet:) for it")
        columns = table_columns(schema, target.key, self.dialect, target.output)
        table = self.table_for(target.output)
        with self.connected() as conn:
            ensure_table(self.dialect, conn, table, columns, target.output)
            # Append mode keeps a stored row on a key conflict: a new run would lose its rows to an old run's.
            if target.fresh_checkpoint and target.mode == APPEND and self.dialect.has_rows(conn, table):
                raise SinkError(f"table {self.dialect.quote(table)} already holds rows of another run, which append mode "
                                "would keep over this run's rows of the same key: pass that run's --state-dir to resume "
                                "it, empty the table, write to another one with ?table=NAME, or use --output-mode update")
        connector = SqlConnector(self.dialect, self.server, table, columns, upsert=target.mode != APPEND,
                                 retry_for_s=self.retry_for_s)
        return BatchFunction(connector, output=target.output, key=target.key, rejected=target.rejected)
