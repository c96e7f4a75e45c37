"""Decode text lines (word count): a payload is a line of text, not JSON.

Blank lines are ignored. A line may start with an ISO-8601 timestamp followed by white space
(``2026-11-22T10:00:03Z to be or not to be``); that is its event time, otherwise its arrival time
(``ingest_time``) is. Refused to dead letters, each with its reason: binary data (bytes that are
not UTF-8 text, or control characters), lines longer than 1 MiB (their payload cut to the first
KiB), a leading timestamp that is not a valid time, or an event time a state could not hold or
that no working clock gives (before 2000, more than ``schema.ahead_ms`` ahead of arrival; see
``speedlayer.decode.validate.time_accepted``).
Everything is a Spark expression, so it runs in the JVM on static DataFrames and streams alike.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.core.schemas import EventSchema, Field
from speedlayer.decode.observation import observed_decode
from speedlayer.decode.validate import Decoded, time_reason

#: the longest line accepted, in bytes of UTF-8
MAX_LINE_BYTES = 1 << 20
#: how much of a refused over-long line its dead letter keeps
KEPT_CHARS = 1024
#: a leading timestamp: ISO-8601 date and time, optional fraction and zone, then white space
LEADING_TIME = r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?)\s+"
#: what text lines never hold: NUL and other control characters (tab aside), and U+FFFD, which
#: Spark's UTF-8 decoding puts where bytes were not UTF-8
BINARY = "[\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f\\ufffd]"

#: a line of text, as this decoder yields it (word count's events): ``event_time`` is the line's
#: leading timestamp, else its arrival time
TEXT_LINE = EventSchema(
    name="text line",
    fields=(Field("line", "string"), Field("event_time", "timestamp")),
    time_field="event_time",
)


def decode_lines(raw: DataFrame, schema: EventSchema = TEXT_LINE, observe: str | None = None,
                 latency_sample: float = 1.0) -> Decoded:
    """Split RAW rows of text lines into ``events`` (line, event_time, ingest_time) and dead letters.

    ``observe`` and ``latency_sample`` attach the per-batch observation as ``decode`` does.

    >>> decode_lines(raw_df).events.columns                  # doctest: +SKIP
    ['line', 'event_time', 'ingest_time']
    """
    value, ingest = F.col("value"), F.col("ingest_time")
    lines = raw.where(value.isNull() | (F.trim(value) != ""))
    stamp = F.regexp_extract(value, LEADING_TIME, 1)
    parsed = lines.select(
        "value", "key", "offset", "ingest_time",
        F.when(stamp != "", stamp).alias("_stamp"),
        F.when(stamp != "", F.replace(stamp, F.lit(" "), F.lit("T")).try_cast("timestamp")).alias("_time"),
    )
    too_long = F.octet_length(value) > MAX_LINE_BYTES
    reason = F.coalesce(
        F.when(value.isNull(), F.lit("empty payload")),
        F.when(too_long, F.format_string(f"line longer than 1 MiB (%d bytes): split it; payload cut to {KEPT_CHARS} characters",
                                         F.octet_length(value))),
        F.when(value.rlike(BINARY), F.lit("binary data, not a line of UTF-8 text")),
        F.when(F.col("_stamp").isNotNull() & F.col("_time").isNull(),
               F.lit("leading timestamp is not a valid time (ISO-8601 expected)")),
        # the event time is the stamp, else the arrival time: either must be a time the state can hold
        F.when(F.col("_stamp").isNotNull(), time_reason(F.col("_time"), ingest, schema, "leading timestamp"))
        .otherwise(F.when(ingest.isNull(), F.lit("no leading timestamp and no ingest time: the line has no time"))
                   .otherwise(time_reason(ingest, ingest, schema, "ingest time (the line has no leading timestamp)"))),
    )
    checked = observed_decode(parsed.select("*", reason.alias("_reason")), observe,
                              F.coalesce(F.col("_time"), F.col("ingest_time")), valid=F.col("_reason").isNull(),
                              latency_sample=latency_sample, keys=[F.col("offset"), F.col("ingest_time")])
    text = F.when(F.col("_stamp").isNotNull(), F.regexp_replace(value, LEADING_TIME, "")).otherwise(value)
    events = checked.where(F.col("_reason").isNull()).select(
        text.alias("line"), F.coalesce(F.col("_time"), F.col("ingest_time")).alias("event_time"), "ingest_time")
    payload = F.when(too_long, F.substring(value, 1, KEPT_CHARS)).otherwise(value)
    dead_letters = checked.where(F.col("_reason").isNotNull()).select(
        payload.alias("payload"), F.col("_reason").alias("reason"), "ingest_time", "key", "offset")
    return Decoded(events=events, dead_letters=dead_letters)
