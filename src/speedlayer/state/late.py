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

Its input must not carry the watermark column itself (the pipeline passes ``event_ms``), or Spark
would filter the very rows it is meant to keep before they reach it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues

from speedlayer.core.offsets import offset_rank

#: what the processor reads from each event (``offset`` may be missing: then any copy of an event is shown)
INPUT_COLUMNS = ("event_id", "vehicle_id", "event_ms", "speed_kmh", "lat", "lon", "offset")

LATE_SCHEMA = T.StructType([
    T.StructField("event_id", T.StringType()),
    T.StructField("vehicle_id", T.StringType()),
    T.StructField("event_time", T.TimestampType()),
    T.StructField("speed_kmh", T.DoubleType()),
    T.StructField("lat", T.DoubleType()),
    T.StructField("lon", T.DoubleType()),
    T.StructField("window_start", T.TimestampType()),     # the tumbling window it belonged to
    T.StructField("window_end", T.TimestampType()),
    T.StructField("missed_watermark", T.TimestampType()),  # the watermark it arrived behind
    T.StructField("copies", T.LongType()),                 # copies of the event that arrived in that batch
])


def lowest_offset_first(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the copies of each event in offset order (``speedlayer.core.offsets``), where they have offsets.

    >>> list(lowest_offset_first(pd.DataFrame({"event_id": ["a", "a"], "offset": ["f:10", "f:9"]}))["offset"])
    ['f:9', 'f:10']
    """
    if "offset" not in rows.columns or not rows["event_id"].duplicated().any():
        return rows
    order = sorted(range(len(rows)), key=lambda i: offset_rank(rows["offset"].iat[i]))
    return rows.iloc[order]


class LateProcessor(StatefulProcessor):
    """Emit the rows at or behind the late-events watermark (minus the allowed lateness), with that watermark and their window."""

    def __init__(self, window_ms: int, lateness_ms: int = 0):
        self.window_ms, self.lateness_ms = window_ms, lateness_ms

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
                late = df[df["event_ms"].to_numpy(np.int64) <= late_wm - self.lateness_ms]
                if not late.empty:
                    frames.append(late)
        else:
            for _ in rows:  # the first batch has no watermark yet: nothing is late
                pass
        self._remember(timerValues.getCurrentWatermarkInMs(), fired=False)
        if frames:
            # Re-sent copies of one event share its key: one row per event and batch, the
            # lowest-offset copy's (as the dedup keeps), with the count.
            late = pd.concat(frames, ignore_index=True)
            copies = late.groupby("event_id", sort=False)["event_id"].transform("size").astype("int64")
            late = lowest_offset_first(late.assign(copies=copies)).drop_duplicates("event_id", ignore_index=True)
            ms = late["event_ms"].to_numpy(np.int64)
            start = ms - np.mod(ms, self.window_ms)
            yield pd.DataFrame({
                "event_id": late["event_id"], "vehicle_id": late["vehicle_id"],
                "event_time": pd.to_datetime(ms, unit="ms"), "speed_kmh": late["speed_kmh"],
                "lat": late["lat"], "lon": late["lon"],
                "window_start": pd.to_datetime(start, unit="ms"), "window_end": pd.to_datetime(start + self.window_ms, unit="ms"),
                "missed_watermark": pd.to_datetime(np.full(len(late), late_wm), unit="ms"), "copies": late["copies"],
            })

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        self._remember(timerValues.getCurrentWatermarkInMs(), fired=True)
        return iter([])

    def close(self) -> None:
        pass
