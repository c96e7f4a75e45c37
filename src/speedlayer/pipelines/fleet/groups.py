"""Vehicles spread over a fixed number of groups, and what the processors keyed by such a group share.

A Python state processor pays a round trip to the JVM per key and call, so the fleet's processors
(incidents, trips) key their state by a group of vehicles (``vehicle_group``), not by one vehicle:
a call gets the rows of many vehicles as one pandas frame, and the group's state is one value,
whose vehicles' records and waiting pings are Arrow IPC bytes. Pings are applied vehicle by
vehicle from one frame sorted by vehicle.

>>> from_bytes(to_bytes(pa.table({"x": [1, 2]}))).column("x").to_pylist()
[1, 2]
>>> vehicle_runs(np.array(["V1", "V1", "V2"]))
[(0, 2), (2, 3)]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues


def vehicle_group(vehicle: str | Column, groups: int) -> Column:
    """Which of ``groups`` groups a vehicle belongs to, as column ``_group``: part of a checkpoint's layout.

    >>> pings.groupBy(vehicle_group("vehicle_id", 16))  # doctest: +SKIP
    """
    return F.pmod(F.xxhash64(vehicle), F.lit(groups)).alias("_group")


def to_bytes(table: pa.Table) -> bytes:
    """``table`` as Arrow IPC stream bytes (a ``binary`` field of a state value)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_bytes(data: bytes) -> pa.Table:
    """The table of ``to_bytes``."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def vehicle_runs(vehicles: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of each run of equal values in ``vehicles`` (a column sorted by vehicle)."""
    if not len(vehicles):
        return []
    bounds = np.concatenate(([0], np.flatnonzero(vehicles[1:] != vehicles[:-1]) + 1, [len(vehicles)]))
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))


class GroupProcessor(StatefulProcessor):
    """A ``transformWithStateInPandas`` processor in EventTime mode keyed by a group of vehicles, its state one
    value named ``group`` (``STATE_SCHEMA``).

    A subclass gives ``_arrived(rows)`` (the input rows as it keeps them), ``_step(arrived, watermark_ms,
    timer_fired)`` (a stream's call: rows or a timer; returns output tuples), ``_static(arrived)`` (the
    one call of a static DataFrame, ``batch=True``, where the end of input ends everything) and
    ``_frame(tuples)`` (the output frame).
    """

    STATE_SCHEMA = ""
    #: the Arrow schema of the pings a group keeps waiting for the watermark
    PENDING: pa.Schema

    def __init__(self, rules: Any, batch: bool = False):
        self.rules, self.batch = rules, batch

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.group = handle.getValueState("group", self.STATE_SCHEMA)

    def _load_group(self, from_table: Any) -> tuple[Any, pd.DataFrame, int | None]:
        """The group's kept table (read with ``from_table``; None: nothing kept), its waiting pings and its timer."""
        value = self.group.get()
        if value is None:
            return None, self.PENDING.empty_table().to_pandas(), None
        kept, pending, timer_ms = value
        return from_table(from_bytes(kept)), from_bytes(pending).to_pandas(), timer_ms

    def _save_group(self, kept: pa.Table, waiting: pd.DataFrame, timer_ms: int | None, due_ms: int,
                    watermark_ms: int) -> None:
        """Store the kept table and the waiting pings (``PENDING``), with one timer at ``due_ms``."""
        pending = pa.Table.from_pandas(waiting, schema=self.PENDING, preserve_index=False)
        self._store((to_bytes(kept), to_bytes(pending)), timer_ms, due_ms, watermark_ms)

    def _store(self, value: tuple | None, timer_ms: int | None, due_ms: int, watermark_ms: int) -> None:
        """Write the group's state ``value`` (all but its last field, the timer) and keep exactly one timer, at
        ``due_ms`` or a millisecond after the watermark if that is later; ``value`` None clears both."""
        if value is None:
            if timer_ms is not None:
                self.handle.deleteTimer(timer_ms)
            self.group.clear()
            return
        due = max(int(due_ms), watermark_ms + 1)  # Spark refuses a timer that is not after the watermark
        if timer_ms != due:
            if timer_ms is not None:
                self.handle.deleteTimer(timer_ms)
            self.handle.registerTimer(due)
        self.group.update((*value, due))

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        frames = [df for df in rows if not df.empty]
        if not frames:
            return
        arrived = self._arrived(pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0])
        out = self._static(arrived) if self.batch else self._step(arrived, timerValues.getCurrentWatermarkInMs(), False)
        if out:
            yield self._frame(out)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        if not self.group.exists():
            return
        out = self._step(None, timerValues.getCurrentWatermarkInMs(), True)
        if out:
            yield self._frame(out)

    def close(self) -> None:
        pass
