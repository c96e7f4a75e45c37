"""Parse and validate raw payloads; every refused row goes to dead letters with a reason.

All of it is built from Spark expressions (``from_json``, ``try_cast``), so it runs in the JVM,
the same on a static DataFrame and on a stream, in micro-batch and continuous mode.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from speedlayer.schemas import EventSchema, Field

_CORRUPT = "_corrupt_record"


@dataclass(frozen=True)
class Decoded:
    """The two outputs of decoding: typed ``events`` and ``dead_letters`` (payload, reason, ...)."""

    events: DataFrame
    dead_letters: DataFrame


def _text_schema(schema: EventSchema) -> T.StructType:
    # Every field is read as text first so that "missing" and "not a number" can be told apart.
    fields = [T.StructField(f.name, T.StringType()) for f in schema.fields]
    return T.StructType(fields + [T.StructField(_CORRUPT, T.StringType())])


def _typed(field: Field, text: Column) -> Column:
    if field.kind == "string":
        return F.when(F.trim(text) != "", text)
    if field.kind == "timestamp":
        # ISO-8601 text, or a number read as epoch milliseconds.
        millis = F.when(text.rlike(r"^-?\d+$"), F.timestamp_millis(text.try_cast("long")))
        return F.coalesce(millis, text.try_cast("timestamp"))
    value = text.try_cast(field.kind)
    if field.kind == "double":
        value = F.when(~F.isnan(value), value)
    return value


def _reason(field: Field, text: Column, typed: Column, ingest_time: Column, schema: EventSchema) -> Column:
    name = field.name
    checks = [
        F.when(text.isNull() | (F.trim(text) == ""), F.lit(f"missing field '{name}'")),
        F.when(typed.isNull(), F.lit(f"field '{name}' is not a valid {field.kind}"
                                     + (" (ISO-8601 or epoch milliseconds)" if field.kind == "timestamp" else ""))),
    ]
    if field.min is not None and field.max is not None:
        checks.append(F.when((typed < field.min) | (typed > field.max),
                             F.lit(f"field '{name}' is outside [{field.min:g}, {field.max:g}]")))
    if field.choices is not None:
        checks.append(F.when(~typed.isin(*field.choices),
                             F.lit(f"field '{name}' is not one of {', '.join(field.choices)}")))
    if name == schema.time_field:
        ahead = ingest_time + F.expr(f"INTERVAL {schema.max_ahead_ms} MILLISECONDS")
        checks.append(F.when(typed > ahead,
                             F.lit(f"field '{name}' is more than {schema.max_ahead_ms // 1000}s ahead of ingest time")))
    return F.coalesce(*checks)


def decode(raw: DataFrame, schema: EventSchema) -> Decoded:
    """Split a RAW DataFrame into typed events and dead letters.

    >>> decoded = decode(raw_df, VEHICLE_EVENT)          # doctest: +SKIP
    >>> decoded.events.columns                            # doctest: +SKIP
    ['event_id', 'vehicle_id', 'event_time', 'speed_kmh', 'lat', 'lon', 'ingest_time']
    """
    # Each field is typed once into its own column; the checks and the output read those columns
    # (inside CASE/COALESCE branches Spark would not share a repeated conversion).
    parsed = raw.select(
        "value", "key", "offset", "ingest_time",
        F.from_json("value", _text_schema(schema), {"columnNameOfCorruptRecord": _CORRUPT, "mode": "PERMISSIVE"}).alias("j"),
    )
    typed_names = {f.name: f"_t_{f.name}" for f in schema.fields}
    typed = parsed.select("*", *(_typed(f, F.col(f"j.{f.name}")).alias(typed_names[f.name]) for f in schema.fields))
    not_object = F.col("j").isNull() | F.col(f"j.{_CORRUPT}").isNotNull()
    reason = F.coalesce(
        F.when(F.col("value").isNull(), F.lit("empty payload")),
        F.when(not_object, F.lit("malformed JSON: not a JSON object")),
        *(_reason(f, F.col(f"j.{f.name}"), F.col(typed_names[f.name]), F.col("ingest_time"), schema)
          for f in schema.fields),
    )
    checked = typed.select("*", reason.alias("_reason"))
    events = checked.where(F.col("_reason").isNull()).select(
        *(F.col(typed_names[f.name]).alias(f.name) for f in schema.fields), "ingest_time"
    )
    dead_letters = checked.where(F.col("_reason").isNotNull()).select(
        F.col("value").alias("payload"), F.col("_reason").alias("reason"), "ingest_time", "key", "offset"
    )
    return Decoded(events=events, dead_letters=dead_letters)
