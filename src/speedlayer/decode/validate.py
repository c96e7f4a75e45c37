"""Parse and validate raw payloads; every refused row goes to dead letters with a reason.

All of it is built from Spark expressions (``from_json``, ``try_cast``), so it runs in the JVM,
the same on a static DataFrame and on a stream, in micro-batch and continuous mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from speedlayer.core.durations import format_duration
from speedlayer.core.schemas import LATEST_MS, SPARK_TYPES, EventSchema, Field

_CORRUPT = "_corrupt_record"
#: the epoch milliseconds a Spark timestamp (microseconds in a long) holds
_MAX_MILLIS = (2**63 - 1) // 1000


@dataclass(frozen=True)
class Decoded:
    """The two outputs of decoding: typed ``events`` and ``dead_letters`` (payload, reason, ...)."""

    events: DataFrame
    dead_letters: DataFrame


def _text_schema(schema: EventSchema) -> T.StructType:
    # Every field is read as text so that "missing" and "not a number" can be told apart.
    fields = [T.StructField(f.name, T.StringType()) for f in schema.fields]
    return T.StructType(fields + [T.StructField(_CORRUPT, T.StringType())])


def _fast_schema(schema: EventSchema) -> T.StructType:
    # Numbers parsed straight into their type (no text copy, no second parse); times stay text,
    # since a JSON number there means epoch milliseconds, which a typed parse would take as seconds.
    fields = [T.StructField(f.name, T.StringType() if f.kind == "timestamp" else SPARK_TYPES[f.kind]) for f in schema.fields]
    return T.StructType(fields + [T.StructField(_CORRUPT, T.StringType())])


def _typed(field: Field, text: Column) -> Column:
    """The field's value from its JSON text (or from the fast parse's typed value); null if missing or invalid."""
    if field.kind == "string":
        return F.when(F.trim(text) != "", text)
    if field.kind == "timestamp":
        # ISO-8601 text, or a number read as epoch milliseconds. The pattern guards the number's
        # cast: try_cast of text that is not a number to long costs ~6 µs per event (it throws and
        # catches inside). The pattern itself is ~6% of a fleet batch, so text with a '-' after a
        # four-digit year (which the pattern can never match) skips it.
        as_timestamp = text.try_cast("timestamp")
        number = text.try_cast("long")
        # past what a timestamp holds (about year 294247), timestamp_millis fails the whole batch
        millis = F.when(text.rlike(r"^-?\d+$") & number.between(-_MAX_MILLIS, _MAX_MILLIS), F.timestamp_millis(number))
        return F.when(F.substring(text, 5, 1) == "-", as_timestamp).otherwise(F.coalesce(millis, as_timestamp))
    value = text.try_cast(field.kind)
    if field.kind == "double":
        value = F.when(~F.isnan(value), value)
    return value


def _in_range(field: Field, typed: Column) -> Column | None:
    """Whether the value lies outside the field's bounds (either may be missing), or None without bounds."""
    if field.min is None and field.max is None:
        return None
    if field.max is None:
        return typed < field.min
    if field.min is None:
        return typed > field.max
    return (typed < field.min) | (typed > field.max)


def _range_text(field: Field) -> str:
    if field.max is None:
        return f"below {field.min:g}"
    if field.min is None:
        return f"above {field.max:g}"
    return f"outside [{field.min:g}, {field.max:g}]"


def _present(field: Field, value: Column) -> Column:
    """Whether an optional field has a value (JSON text or the fast parse's value): not missing, null or blank."""
    if field.kind in ("string", "timestamp"):
        return value.isNotNull() & (F.trim(value) != "")
    return value.isNotNull()


def _not_a_choice(field: Field, typed: Column) -> Column | None:
    if field.choices is None:
        return None
    return ~typed.isin(*field.choices)


def too_far_ahead(event_time: Column, ingest_time: Column, schema: EventSchema) -> Column:
    """Whether ``event_time`` lies more than ``schema.ahead_ms`` ahead of ``ingest_time``.

    Compared in epoch microseconds: ``timestamp + INTERVAL`` goes through the session time zone's
    calendar for every row (~2% of a fleet batch), though no day is added.

    >>> events.where(too_far_ahead(F.col("event_time"), F.col("ingest_time"), VEHICLE_EVENT))  # doctest: +SKIP
    """
    # an ingest time past LATEST_MS decides nothing more (later event times are refused anyway), and
    # capped there the sum cannot overflow (ANSI mode would fail the batch); not ``least``, which skips a null
    micros, latest = F.unix_micros(ingest_time), F.lit(LATEST_MS * 1000)
    ingest = F.when(micros > latest, latest).otherwise(micros)
    return F.unix_micros(event_time) > ingest + F.lit(schema.ahead_ms * 1000)


def time_accepted(event_time: Column, ingest_time: Column, schema: EventSchema) -> Column:
    """Whether an event time may pass: in ``[schema.earliest_ms, LATEST_MS)``, not too far ahead of a known ingest time.

    Never null (a null time or ingest time is refused), so a row is an event or a dead letter, never neither.

    >>> events.where(time_accepted(F.col("event_time"), F.col("ingest_time"), VEHICLE_EVENT))  # doctest: +SKIP
    """
    micros = F.unix_micros(event_time)
    return F.coalesce(
        (micros >= F.lit(schema.earliest_ms * 1000)) & (micros < F.lit(LATEST_MS * 1000))
        & ~too_far_ahead(event_time, ingest_time, schema),
        F.lit(False))


def time_reason(event_time: Column, ingest_time: Column, schema: EventSchema, subject: str) -> Column:
    """Why ``time_accepted`` refuses a (non-null) event time, or null; ``subject`` names it in the reason.

    >>> time_reason(F.col("t"), F.col("ingest_time"), VEHICLE_EVENT, "field 't'")  # doctest: +SKIP
    """
    micros = F.unix_micros(event_time)
    return F.coalesce(
        F.when(ingest_time.isNull(), F.lit(f"{subject} cannot be checked: the source gave no ingest time")),
        F.when(micros < F.lit(schema.earliest_ms * 1000),
               F.lit(f"{subject} is before {_iso(schema.earliest_ms)}: a reset clock")),
        F.when(micros >= F.lit(LATEST_MS * 1000), F.lit(f"{subject} is not before {_iso(LATEST_MS)}: a clock gone wrong")),
        F.when(too_far_ahead(event_time, ingest_time, schema),
               F.lit(f"{subject} is more than {format_duration(schema.ahead_ms)} ahead of ingest time")),
    )


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _reason(field: Field, text: Column, typed: Column, ingest_time: Column, schema: EventSchema) -> Column:
    name = field.name
    invalid = typed.isNull() if field.required else _present(field, text) & typed.isNull()
    checks = [
        *([F.when(text.isNull() | (F.trim(text) == ""), F.lit(f"missing field '{name}'"))] if field.required else []),
        F.when(invalid, F.lit(f"field '{name}' is not a valid {field.kind}"
                              + (" (ISO-8601 or epoch milliseconds)" if field.kind == "timestamp" else ""))),
    ]
    outside = _in_range(field, typed)
    if outside is not None:
        checks.append(F.when(outside, F.lit(f"field '{name}' is {_range_text(field)}")))
    unknown = _not_a_choice(field, typed)
    if unknown is not None:
        checks.append(F.when(unknown, F.lit(f"field '{name}' is not one of {', '.join(field.choices)}")))
    if name == schema.time_field:
        checks.append(time_reason(typed, ingest_time, schema, f"field '{name}'"))
    return F.coalesce(*checks)


def _accepted(schema: EventSchema, typed: dict[str, Column], ingest_time: Column,
              present: dict[str, Column] | None = None) -> Column:
    """Whether every typed field (of the fast parse, or of the text path) is present and valid.

    ``present`` tells, for each optional field, whether it has a value: one without passes.
    """
    ok = F.lit(True)
    for f in schema.fields:
        if not f.required:
            ok = ok & _optional_ok(f, typed[f.name], present[f.name])
            continue
        ok = ok & typed[f.name].isNotNull()
        for refused in (_in_range(f, typed[f.name]), _not_a_choice(f, typed[f.name])):
            if refused is not None:
                ok = ok & ~refused
        if f.name == schema.time_field:
            ok = ok & time_accepted(typed[f.name], ingest_time, schema)
    return ok


def _optional_ok(field: Field, typed: Column, present: Column) -> Column:
    """An optional field passes without a value, or with a valid one (never null: the row is decided)."""
    ok = typed.isNotNull()
    for refused in (_in_range(field, typed), _not_a_choice(field, typed)):
        if refused is not None:
            ok = ok & ~refused
    return ~present | ok


def decode(raw: DataFrame, schema: EventSchema, observe: str | None = None, latency_sample: float = 1.0) -> Decoded:
    """Split a RAW DataFrame into typed events and dead letters.

    With ``observe``, a Spark observation of that name counts both sides and the event/ingest
    times of each micro-batch (``speedlayer.decode.observation.observe_latency``) for the progress report;
    ``latency_sample`` is the fraction of events its latency percentiles read.

    >>> decoded = decode(raw_df, VEHICLE_EVENT)          # doctest: +SKIP
    >>> decoded.events.columns                            # doctest: +SKIP
    ['event_id', 'vehicle_id', 'event_time', 'speed_kmh', 'lat', 'lon', 'ingest_time', 'offset']
    """
    typed, fast_cols, optional = _both_paths(raw, schema)
    checked, typed_names, slow_cols = _checked(typed, schema, fast_cols, optional)
    if observe:
        from speedlayer.decode.observation import observe_latency, sampled_by

        sample = sampled_by([F.col(name) for name in typed_names.values()], latency_sample)
        checked = observe_latency(checked, observe, F.col("_valid"), F.col(typed_names[schema.time_field]),
                                  F.col("ingest_time"), sample)
    events = checked.where(F.col("_valid")).select(
        *(F.col(typed_names[f.name]).alias(f.name) for f in schema.fields), "ingest_time", "offset"
    )
    return Decoded(events=events, dead_letters=_dead_letters(checked, schema, slow_cols))


def _both_paths(raw: DataFrame, schema: EventSchema) -> tuple[DataFrame, dict[str, Column], list[Field]]:
    """RAW rows with each field typed by the fast parse, whether the fast path accepts the row
    (``_accepted``), and the text parse of the rows it does not (``_text``)."""
    # Two paths. The fast one parses numbers straight into their types, as a hand-written job would;
    # nearly every event passes its checks and is taken from there. Only a row it does not accept
    # takes the text path, which reads every field as text to tell "missing" from "not a number",
    # accepts numbers sent as strings, and names the reason. The text path sits in the ELSE branch
    # of a CASE, which Spark evaluates only for those rows.
    options = {"columnNameOfCorruptRecord": _CORRUPT, "mode": "PERMISSIVE"}
    fast = F.from_json("value", _fast_schema(schema), options)
    # Each field is typed once into its own column; the checks and the output read those columns.
    fast_names = {f.name: f"_f_{f.name}" for f in schema.fields}
    # An optional field also gets whether it has a value (a schema of required fields only gets nothing more).
    optional = [f for f in schema.fields if not f.required]
    typed = raw.select("value", "key", "offset", "ingest_time", fast[_CORRUPT].alias(_CORRUPT),
                       *(_typed(f, fast[f.name]).alias(fast_names[f.name]) for f in schema.fields),
                       *(_present(f, fast[f.name]).alias(f"_p_{f.name}") for f in optional))
    fast_cols = {f.name: F.col(fast_names[f.name]) for f in schema.fields}
    accepted = (F.col("value").isNotNull() & F.col(_CORRUPT).isNull()
                & _accepted(schema, fast_cols, F.col("ingest_time"), {f.name: F.col(f"_p_{f.name}") for f in optional}))
    # The text parse gets a column of its own (null for accepted rows): written inline, its schema
    # stood in each check that reads it (an optimized plan of 27,000 characters, not 8,000, planned
    # again every micro-batch). It shares one projection with ``_accepted``, which it reads: every
    # projection in this chain is walked again, from each one above it, by several of Spark's
    # optimizer rules in every micro-batch. ``accepted`` stands un-negated in both, so that Spark
    # evaluates it once for the two (the optimizer would rewrite ``~accepted`` into another expression).
    text_parse = F.from_json("value", _text_schema(schema), options)
    typed = typed.select("value", "key", "offset", "ingest_time", *fast_names.values(), accepted.alias("_accepted"),
                         F.when(accepted, F.lit(None)).otherwise(text_parse).alias("_text"))
    return typed, fast_cols, optional


def _checked(typed: DataFrame, schema: EventSchema, fast_cols: dict[str, Column],
             optional: list[Field]) -> tuple[DataFrame, dict[str, str], dict[str, Column]]:
    """Each field's value from the path that took the row (``_t_*``) and whether the row is valid
    (``_valid``); also the names of those columns and the text path's typed values (``_s_*``)."""
    text = F.col("_text")
    # The text path's typed values get columns of their own (null for accepted rows, whose text is
    # null): written inline, each stood in every check that reads it and in the output, several
    # copies of each field's parse that Spark planned again in every micro-batch.
    slow_names = {f.name: f"_s_{f.name}" for f in schema.fields}
    slow_present_names = {f.name: f"_sp_{f.name}" for f in optional}
    slow = typed.select(
        "value", "key", "offset", "ingest_time", "_text", "_accepted", *fast_cols.values(),
        *(_typed(f, text[f.name]).alias(slow_names[f.name]) for f in schema.fields),
        *(_present(f, text[f.name]).alias(slow_present_names[f.name]) for f in optional),
    )
    slow_cols = {name: F.col(column) for name, column in slow_names.items()}
    # Whether a row is valid is told apart from why it is not: a query of events reads only the
    # former, so the reasons (most of decode's expressions) are planned only by a dead-letter query.
    slow_present = {name: F.col(column) for name, column in slow_present_names.items()}
    slow_valid = text.isNotNull() & text[_CORRUPT].isNull() & _accepted(schema, slow_cols, F.col("ingest_time"), slow_present)
    typed_names = {f.name: f"_t_{f.name}" for f in schema.fields}
    checked = slow.select(
        "value", "key", "offset", "ingest_time", "_text", *slow_names.values(),
        *(F.when(F.col("_accepted"), fast_cols[f.name]).otherwise(slow_cols[f.name]).alias(typed_names[f.name])
          for f in schema.fields),
        (F.col("_accepted") | slow_valid).alias("_valid"),
    )
    return checked, typed_names, slow_cols


def _dead_letters(checked: DataFrame, schema: EventSchema, slow_cols: dict[str, Column]) -> DataFrame:
    """The refused rows: their payload and the first reason that holds."""
    text = F.col("_text")
    not_object = text.isNull() | text[_CORRUPT].isNotNull()
    reason = F.coalesce(
        F.when(F.col("value").isNull(), F.lit("empty payload")),
        F.when(not_object, F.lit("malformed JSON: not a JSON object")),
        *(_reason(f, text[f.name], slow_cols[f.name], F.col("ingest_time"), schema) for f in schema.fields),
    )
    return checked.where(~F.col("_valid")).select(
        F.col("value").alias("payload"), reason.alias("reason"), "ingest_time", "key", "offset"
    )
