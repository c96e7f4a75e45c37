"""Late events, kept: the events Spark's stateful operators drop as behind the watermark.

Spark filters late rows against an *older* watermark than the one that closes windows: in
micro-batch k, a stateful operator drops rows whose event time is at or before the watermark of
batch k-1 (``eventTimeWatermarkForLateEvents``), while batch k closes windows and fires timers at
batch k's own watermark (``eventTimeWatermarkForEviction``). The processor here reproduces the
first one exactly: it runs under one key, so it sees every batch with data, and a timer one
millisecond past the current watermark wakes it in every batch where the watermark moves, so its
state always holds the watermark of the previous batch.

With allowed lateness ``L`` (fleet windows corrected by late events) the windows query runs with
Spark's watermark ``L`` further back, so Spark drops rows at or before the previous watermark minus
``L``: the processor uses the same bound, and still reports the real watermark as missed.

It works for any event schema: a late row is the event's own fields (``late_schema``), keyed by
the job's dedup key. Its input must not carry the watermark column itself (the pipeline passes the
event time as ``event_ms``), or Spark would filter the very rows it is meant to keep before they
reach it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues

from speedlayer.core.errors import ConfigError
from speedlayer.core.keys import key_fields
from speedlayer.core.offsets import offset_rank
from speedlayer.core.schemas import EventSchema

#: the event time as the processor reads it, epoch milliseconds (the watermark column itself never is)
EVENT_MS = "event_ms"
#: each copy's source offset (may be null: then any copy of an event is shown)
OFFSET = "offset"
#: the one grouping key every event is given, so one processor instance sees every batch
GROUP = "_all"

#: the columns that follow the event's own fields in a late row
LATE_COLUMNS = (
    T.StructField("window_start", T.TimestampType()),     # the tumbling window it belonged to
    T.StructField("window_end", T.TimestampType()),
    T.StructField("missed_watermark", T.TimestampType()),  # the watermark it arrived behind
    T.StructField("copies", T.LongType()),                 # copies of the event that arrived in that batch
)


def late_schema(schema: EventSchema) -> T.StructType:
    """The rows of a ``late`` output: the event's fields in schema order, then ``LATE_COLUMNS``.

    A field named like a column the processor adds or reads is refused (ConfigError).

    >>> from speedlayer.core.schemas import Field
    >>> ACTION = EventSchema("app action", (Field("id", "string"), Field("time", "timestamp"), Field("action", "string")), "time")
    >>> late_schema(ACTION).fieldNames()
    ['id', 'time', 'action', 'window_start', 'window_end', 'missed_watermark', 'copies']
    """
    taken = {f.name for f in LATE_COLUMNS} | {OFFSET, GROUP} | ({EVENT_MS} - {schema.time_field})
    clash = [f.name for f in schema.fields if f.name in taken]
    if clash:
        raise ConfigError(f"event schema {schema.name!r} has field(s) {', '.join(clash)}, which the late output uses "
                          f"itself: rename them in the schema (reserved: {', '.join(sorted(taken))})")
    return T.StructType([f for f in schema.spark_type().fields if f.name != "ingest_time"] + list(LATE_COLUMNS))


def input_columns(schema: EventSchema) -> tuple[str, ...]:
    """What the processor reads of each event: its fields, event time as ``EVENT_MS``, and ``OFFSET``.

    >>> from speedlayer.core.schemas import Field
    >>> ACTION = EventSchema("app action", (Field("id", "string"), Field("time", "timestamp"), Field("action", "string")), "time")
    >>> input_columns(ACTION)
    ('id', 'event_ms', 'action', 'offset')
    """
    return tuple(EVENT_MS if f.name == schema.time_field else f.name for f in schema.fields) + (OFFSET,)


def lowest_offset_first(rows: pd.DataFrame, key: Sequence[str]) -> pd.DataFrame:
    """``rows`` with the copies of each ``key`` (its columns) in offset order (``speedlayer.core.offsets``),
    where they have offsets.

    >>> list(lowest_offset_first(pd.DataFrame({"id": ["a", "a"], "offset": ["f:10", "f:9"]}), ["id"])["offset"])
    ['f:9', 'f:10']
    """
    if OFFSET not in rows.columns or not rows.duplicated(list(key)).any():
        return rows
    order = sorted(range(len(rows)), key=lambda i: offset_rank(rows[OFFSET].iat[i]))
    return rows.iloc[order]


def key_columns(schema: EventSchema, key: str | Sequence[str]) -> tuple[str, ...]:
    """The processor's input columns of a dedup key: the event time is read as ``EVENT_MS``, so a late
    row's time, shown to the millisecond, is keyed to the millisecond too.

    >>> from speedlayer.core.schemas import Field
    >>> ACTION = EventSchema("app action", (Field("id", "string"), Field("time", "timestamp"), Field("action", "string")), "time")
    >>> key_columns(ACTION, ("id", "time"))
    ('id', 'event_ms')
    """
    return tuple(EVENT_MS if name == schema.time_field else name for name in key_fields(key))


class LateProcessor(StatefulProcessor):
    """Emit the rows at or behind the late-events watermark (minus the allowed lateness), with that watermark and their window.

    Rows come in as ``input_columns(schema)`` and go out as ``late_schema(schema)``, one per ``key``
    (the job's dedup key: a field, or several together) and batch.

    >>> LateProcessor(VEHICLE_EVENT, "event_id", window_ms=10_000)  # doctest: +SKIP
    >>> LateProcessor(READING, ("device_id", "reading_time"), window_ms=10_000)  # doctest: +SKIP
    """

    def __init__(self, schema: EventSchema, key: str | Sequence[str], window_ms: int, lateness_ms: int = 0):
        self.fields, self.time_field = tuple(f.name for f in schema.fields), schema.time_field
        self.key, self.window_ms, self.lateness_ms = list(key_columns(schema, key)), window_ms, lateness_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        # the eviction watermark of the last batch this processor ran in (= the previous batch's)
        self.seen = handle.getValueState("watermark", "watermark_ms long, timer_ms long")

    def _remember(self, watermark_ms: int, fired: bool) -> None:
        _, timer_ms = self.seen.get() or (None, None)
        if timer_ms is not None and not fired and timer_ms != watermark_ms + 1:
            self.handle.deleteTimer(timer_ms)
        if fired or timer_ms != watermark_ms + 1:
            self.handle.registerTimer(watermark_ms + 1)
        self.seen.update((watermark_ms, watermark_ms + 1))

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        previous = self.seen.get()
        late_wm = previous[0] if previous is not None else None
        frames = []
        if late_wm is not None and late_wm >= 0:
            for df in rows:
                late = df[df[EVENT_MS].to_numpy(np.int64) <= late_wm - self.lateness_ms]
                if not late.empty:
                    frames.append(late)
        else:
            for _ in rows:  # the first batch has no watermark yet: nothing is late
                pass
        self._remember(timerValues.getCurrentWatermarkInMs(), fired=False)
        if frames:
            yield self._rows(pd.concat(frames, ignore_index=True), late_wm)

    def _rows(self, late: pd.DataFrame, late_wm: int) -> pd.DataFrame:
        """One row per event of ``late``: re-sent copies share its key, the lowest-offset copy's
        row is shown (as the dedup keeps), with the count."""
        copies = late.groupby(self.key, sort=False, dropna=False)[EVENT_MS].transform("size").astype("int64")
        late = lowest_offset_first(late.assign(copies=copies), self.key).drop_duplicates(self.key, ignore_index=True)
        ms = late[EVENT_MS].to_numpy(np.int64)
        start = ms - np.mod(ms, self.window_ms)
        rows = {name: pd.to_datetime(ms, unit="ms") if name == self.time_field else late[name] for name in self.fields}
        rows.update({
            "window_start": pd.to_datetime(start, unit="ms"), "window_end": pd.to_datetime(start + self.window_ms, unit="ms"),
            "missed_watermark": pd.to_datetime(np.full(len(late), late_wm), unit="ms"), "copies": late["copies"],
        })
        return pd.DataFrame(rows)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        self._remember(timerValues.getCurrentWatermarkInMs(), fired=True)
        return iter([])

    def close(self) -> None:
        pass
