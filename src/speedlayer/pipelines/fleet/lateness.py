"""The fleet ``windows`` output with allowed lateness: a closed window is corrected by late events within a bound.

Flink's allowed lateness, per vehicle, for ``transformWithStateInPandas`` in EventTime mode. With
watermark ``W`` and lateness ``L``:

- a window ``[start, end)`` is emitted once ``W`` reaches ``end`` (revision 0), with every event
  that arrived up to that batch, exactly as Spark's own append-mode windows;
- an event that arrives after that, while ``end + L`` is still ahead of ``W``, re-emits its window
  with the corrected values (revision 1, 2, ...: one per batch that changed it);
- the window's state is dropped once ``W`` reaches ``end + L``.

The query runs with Spark's watermark delay set to watermark + ``L`` (``W' = W - L``), so that
Spark's late filter, which drops rows at or before the *previous* batch's ``W'``, lets through the
events the windows may still take; the processor therefore sees ``W'`` and adds ``L`` back.
Events Spark drops there are exactly what the ``late`` output keeps (``speedlayer.state.late``).

``corrected_windows`` runs the processor, ``WindowsProcessor``::

    limited.groupBy("vehicle_id").transformWithStateInPandas(
        WindowsProcessor(10_000, 30_000), WINDOWS_SCHEMA, "Update", "EventTime")
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues

from speedlayer.pipelines.base import Params
from speedlayer.pipelines.fleet.options import fleet_options

#: what the processor reads from each event (``event_ms`` is ``event_time`` in epoch milliseconds)
INPUT_COLUMNS = ("vehicle_id", "event_ms", "speed_kmh", "speed_limit_kmh")

#: the fleet ``windows`` output's columns, plus the revision
WINDOWS_SCHEMA = T.StructType([
    T.StructField("window_start", T.TimestampType()),
    T.StructField("window_end", T.TimestampType()),
    T.StructField("vehicle_id", T.StringType()),
    T.StructField("events", T.LongType()),
    T.StructField("avg_speed_kmh", T.DoubleType()),
    T.StructField("max_speed_kmh", T.DoubleType()),
    T.StructField("over_limit_events", T.LongType()),
    T.StructField("revision", T.LongType()),  # 0 when the watermark closes the window, then one per correction
])
OUTPUT_COLUMNS = tuple(f.name for f in WINDOWS_SCHEMA.fields)

#: one open window of a vehicle; revision -1: not emitted yet
WINDOW_STATE = "start_ms long, events long, speed_sum double, max_speed double, over_limit long, revision long"
_NOT_EMITTED = -1


class WindowsProcessor(StatefulProcessor):
    """Per vehicle: its open windows (list state) and one event-time timer at the next thing to do."""

    def __init__(self, window_ms: int, lateness_ms: int):
        self.window_ms, self.lateness_ms = window_ms, lateness_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.windows = handle.getListState("windows", WINDOW_STATE)
        self.timer = handle.getValueState("timer", "timer_ms long")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        frames = [df for df in rows if not df.empty]
        if not frames:
            return
        events = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        ms = events["event_ms"].to_numpy(np.int64)
        speed = events["speed_kmh"].to_numpy(float)
        arrived = pd.DataFrame({
            "start_ms": ms - np.mod(ms, self.window_ms), "speed": speed,
            # NaN limit (no zone) compares False, as Spark's null does in ``sum(speed > limit)``
            "over": (speed > events["speed_limit_kmh"].to_numpy(float)).astype(np.int64),
        }).groupby("start_ms", sort=True).agg(events=("speed", "size"), speed_sum=("speed", "sum"),
                                              max_speed=("speed", "max"), over_limit=("over", "sum"))
        out = self._step(key[0], arrived, timerValues.getCurrentWatermarkInMs())
        if out is not None:
            yield out

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        self.timer.clear()  # Spark removes a timer once it fired
        out = self._step(key[0], None, timerValues.getCurrentWatermarkInMs())
        if out is not None:
            yield out

    def _step(self, vehicle: str, arrived: pd.DataFrame | None, spark_watermark_ms: int) -> pd.DataFrame | None:
        """Merge arrived events into their windows, emit what closed or changed, drop what expired."""
        windows = {row[0]: list(row[1:]) for row in self.windows.get()} if self.windows.exists() else {}
        changed = set()
        if arrived is not None:
            for start, events, total, top, over in arrived.itertuples(name=None):
                start = int(start)
                w = windows.get(start)
                if w is None:
                    windows[start] = [int(events), float(total), float(top), int(over), _NOT_EMITTED]
                else:
                    w[0], w[1], w[2], w[3] = w[0] + int(events), w[1] + float(total), max(w[2], float(top)), w[3] + int(over)
                changed.add(start)
        watermark_ms = spark_watermark_ms + self.lateness_ms  # the real watermark
        emit = []
        for start in sorted(windows):
            w, end = windows[start], start + self.window_ms
            if end > watermark_ms:
                continue  # still open
            if w[4] == _NOT_EMITTED or start in changed:
                w[4] += 1
                emit.append((start, end, vehicle, w[0], w[1] / w[0], w[2], w[3], w[4]))
            if end + self.lateness_ms <= watermark_ms:
                del windows[start]  # beyond the lateness: later events go to the late output
        self._save(windows, spark_watermark_ms)
        if not emit:
            return None
        df = pd.DataFrame(emit, columns=list(OUTPUT_COLUMNS))
        for name in ("window_start", "window_end"):
            df[name] = pd.to_datetime(df[name], unit="ms")
        return df

    def _save(self, windows: dict[int, list], spark_watermark_ms: int) -> None:
        """Store the windows and keep one timer, at the next emission or expiry (in Spark's watermark)."""
        stored = self.timer.get()
        current = stored[0] if stored is not None else None
        if not windows:
            self.windows.clear()
            if current is not None:
                self.handle.deleteTimer(current)
                self.timer.clear()
            return
        self.windows.put([(start, *w) for start, w in sorted(windows.items())])
        # In W' = W - L: a window closes at end - L and expires at end.
        due = min(start + self.window_ms - (self.lateness_ms if w[4] == _NOT_EMITTED else 0) for start, w in windows.items())
        due = max(due, spark_watermark_ms + 1)  # Spark refuses a timer that is not after the watermark
        if due != current:
            if current is not None:
                self.handle.deleteTimer(current)
            self.handle.registerTimer(due)
            self.timer.update((due,))

    def close(self) -> None:
        pass


def corrected_windows(limited: DataFrame, params: Params, output_mode: str = "Update") -> DataFrame:
    """Tumbling windows per vehicle with a ``revision``: 0 when closed, then one per correction.

    ``limited``: deduplicated streaming events that carry their zone's limit (``with_speed_limit``),
    with Spark's watermark delay set to watermark + ``params.allowed_lateness_ms`` (see the module
    of the processor for why).

    >>> corrected_windows(with_speed_limit(lenient, params), params).columns[-1]  # doctest: +SKIP
    'revision'
    """
    rows = limited.select(*(F.unix_millis("event_time").alias(c) if c == "event_ms" else F.col(c) for c in INPUT_COLUMNS))
    return rows.groupBy("vehicle_id").transformWithStateInPandas(
        statefulProcessor=WindowsProcessor(params.window_ms, fleet_options(params).allowed_lateness_ms),
        outputStructType=WINDOWS_SCHEMA,
        outputMode=output_mode, timeMode="EventTime",
    )
