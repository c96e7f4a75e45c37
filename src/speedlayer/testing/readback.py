"""Reading back what a built-in sink holds, as a DataFrame shaped like the rows written to it.

The sink check (``sink_check``) compares what a destination holds before and after a replay; for
its own sinks a user passes ``read_back``, for the built-in ones ``sink_reader`` gives one:
``parquet:`` through Spark's reader (committed files only), ``postgresql:``/``mysql:`` with a
``SELECT`` of the output's table, ``redis:`` from the output's stream (``XRANGE``) or, for outputs
keyed by a time, its latest-state hashes (``<prefix>:<entity>``). Values come back in the
written rows' types (database times without a zone are UTC; Redis text is cast).

>>> reader = sink_reader(spark, open_sink("parquet:out/w"), target, df.schema); reader().count()  # doctest: +SKIP
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from speedlayer.core.errors import ConfigError
from speedlayer.sinks.base import Sink, Target
from speedlayer.sinks.parquet import ParquetSink
from speedlayer.sinks.redis import RedisSink
from speedlayer.sinks.sql import SqlSink

Reader = Callable[[], DataFrame]


def sink_reader(spark: SparkSession, sink: Sink, target: Target, schema: T.StructType) -> Reader:
    """A function that reads what ``sink`` holds of ``target``'s output; ConfigError for other sinks."""
    if isinstance(sink, ParquetSink):
        return lambda: spark.read.schema(schema).parquet(str(sink.path))
    if isinstance(sink, SqlSink):
        return lambda: _sql_rows(spark, sink, target, schema)
    if isinstance(sink, RedisSink):
        return lambda: _redis_rows(spark, sink, target, schema)
    raise ConfigError(f"there is no built-in reader for {sink.scheme}: sinks: pass read_back=<a function that returns "
                      "what the destination holds as a DataFrame>")


def typed_frame(spark: SparkSession, rows: list[tuple], schema: T.StructType) -> DataFrame:
    """Rows read from a database as a DataFrame of ``schema``: naive times are UTC, numbers take the field's type.

    >>> [_value(1, T.BooleanType()), _value(Decimal("2.5"), T.DoubleType())]
    [True, 2.5]
    """
    return spark.createDataFrame([tuple(_value(v, f.dataType) for v, f in zip(row, schema.fields)) for row in rows], schema)


def _value(value: Any, kind: T.DataType) -> Any:
    if value is None:
        return None
    if isinstance(kind, (T.TimestampType, T.TimestampNTZType)) and isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value
    if isinstance(kind, T.BooleanType):
        return bool(value)
    if isinstance(kind, (T.DoubleType, T.FloatType)):
        return float(value)
    if isinstance(kind, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
        return int(value)
    if isinstance(kind, T.DecimalType) and not isinstance(value, Decimal):
        return Decimal(str(value))
    return value


def _sql_rows(spark: SparkSession, sink: SqlSink, target: Target, schema: T.StructType) -> DataFrame:
    quote = sink.dialect.quote
    columns = ", ".join(quote((f.name,)) for f in schema.fields)
    with sink.connected() as conn:
        cursor = conn.cursor()
        try:
            cursor.execute(f"SELECT {columns} FROM {quote(sink.table_for(target.output))}")
            rows = cursor.fetchall()
        finally:
            cursor.close()
    return typed_frame(spark, [tuple(r) for r in rows], schema)


def _redis_rows(spark: SparkSession, sink: RedisSink, target: Target, schema: T.StructType) -> DataFrame:
    """Entries of the output's stream, or its latest-state hashes (the layout ``RedisSink.prepare`` chose)."""
    prefix = sink.options.prefix or f"{target.job}:{target.output}"
    timed = [k for k in target.key if isinstance(schema[k].dataType, (T.TimestampType, T.TimestampNTZType))]
    client = sink.server.connect()
    try:
        if timed and sink.options.stream is None:
            keys = [k for k in client.scan_iter(match=f"{prefix}:*") if client.type(k) in (b"hash", "hash")]
            records = [client.hgetall(k) for k in keys]
        else:
            records = [fields for _, fields in client.xrange(sink.options.stream or prefix, "-", "+")]
    finally:
        client.close()
    names = schema.fieldNames()
    text = [tuple(_text(record.get(name.encode())) for name in names) for record in records]
    strings = T.StructType([T.StructField(n, T.StringType()) for n in names])
    return spark.createDataFrame(text, strings).select(*(F.col(f.name).cast(f.dataType) for f in schema.fields))


def _text(value: bytes | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
