"""Event schemas. Every source yields RAW; ``decode`` turns RAW into a typed event schema.

An ``EventSchema`` lists its fields with the checks a valid event passes, so decoding and the
dead-letter reasons are written once for every kind of event. Each job's own schema lives with the
job (the fleet's pings in ``speedlayer.pipelines.fleet.schemas``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pyspark.sql import types as T

#: The shape every source emits: the payload as text plus where and when it was taken in.
RAW_SCHEMA = T.StructType(
    [
        T.StructField("value", T.StringType()),          # the event as the ingestion system holds it
        T.StructField("key", T.StringType()),            # partition key, when the source has one
        T.StructField("offset", T.StringType()),         # position in the source (id, offset, file)
        T.StructField("ingest_time", T.TimestampType()),  # when the source took the event in
    ]
)

#: Dead letters keep the raw payload and say why it was refused.
DEAD_LETTER_SCHEMA = T.StructType(
    [
        T.StructField("payload", T.StringType()),
        T.StructField("reason", T.StringType()),
        T.StructField("ingest_time", T.TimestampType()),
        T.StructField("key", T.StringType()),
        T.StructField("offset", T.StringType()),
    ]
)

Kind = Literal["string", "double", "long", "boolean", "timestamp"]
#: the Spark type of each kind of field
SPARK_TYPES: dict[str, T.DataType] = {"string": T.StringType(), "double": T.DoubleType(), "long": T.LongType(),
                                      "boolean": T.BooleanType(), "timestamp": T.TimestampType()}


@dataclass(frozen=True)
class Field:
    """One field of an event: its type and the range a valid value lies in (inclusive), or its allowed values.

    A required field that is missing (or null, or blank text) makes the event a dead letter; an
    optional one (``required=False``) may be missing, and is then null, but a value it has must pass
    the same checks.

    >>> Field("coupon", "string", required=False).required
    False
    """

    name: str
    kind: Kind
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    required: bool = True


#: 2000-01-01T00:00:00Z: an event time before it is a clock that was reset (to 1970, the GPS epoch
#: 1980, a GPS week rollover to 1999), not an event
EARLIEST_MS = 946_684_800_000
#: 2262-01-01T00:00:00Z: pandas, which the Python state processors hand rows to, holds no time after
#: 2262-04-11 (nor before 1677); a time from a clock gone wrong must never reach them
LATEST_MS = 9_214_646_400_000
#: how far ahead of its ingest time an event may be by default: a fifth of the default 5 s watermark
#: (an accepted event ahead by A moves the watermark by A; see docs/design.md, "Event time")
DEFAULT_MAX_AHEAD_MS = 1_000


@dataclass(frozen=True)
class EventSchema:
    """A kind of event: its fields, which one is event time, and the times it may take.

    An event time must lie in ``[earliest_ms, LATEST_MS)`` and at most ``ahead_ms`` ahead of the
    event's ingest time; otherwise the event is a dead letter. ``max_ahead_ms`` None (the default)
    leaves that bound to the run (``--max-ahead``, by default a fifth of the watermark); a value is
    this stream's own bound, which only ``--max-ahead`` given to the run overrides.

    >>> EventSchema("ping", (), "t").ahead_ms, EventSchema("ping", (), "t", max_ahead_ms=250).ahead_ms
    (1000, 250)
    """

    name: str
    fields: tuple[Field, ...]
    time_field: str
    max_ahead_ms: int | None = None
    earliest_ms: int = EARLIEST_MS

    @property
    def ahead_ms(self) -> int:
        """How far ahead of its ingest time an event time may be, in ms (the bound decoding applies)."""
        return DEFAULT_MAX_AHEAD_MS if self.max_ahead_ms is None else self.max_ahead_ms

    def spark_type(self) -> T.StructType:
        """The typed Spark schema of accepted events (plus ``ingest_time``)."""
        cols = [T.StructField(f.name, SPARK_TYPES[f.kind]) for f in self.fields]
        return T.StructType(cols + [T.StructField("ingest_time", T.TimestampType())])
