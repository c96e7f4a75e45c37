"""The Spark side of ``generator://?...&max_per_batch=N``: a paced sequence with admission control.

Row ``n`` is due at its ingest time, ``start + floor(n * 1000 / rate)`` ms, and is readable from
that millisecond on (Spark's rate source releases a second's rows only once the second is over).
An offset is ``{"n": rows}``. ``latestOffset`` returns the rows due now, but no more than
``max_per_batch`` beyond the batch's start: a machine too slow for the rate reads bounded batches
and falls behind, which ``reportLatestOffset`` makes visible as the source's lag (``latestOffset``
in Spark's progress). With ``--max-events`` no offset goes past the last event. Executors read
a partition as Arrow batches of sequence numbers; the generator's kind computes the events from
them in the JVM, as it does from the rate source.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import LongType, StructField, StructType

FORMAT = "speedlayer_paced"
#: sequence numbers per Arrow batch a task yields (a big backlog is not one array)
ROWS_PER_ARROW_BATCH = 65_536
SCHEMA = StructType([StructField("n", LongType())])


def due(now_ms: int, start_ms: int, rate: int) -> int:
    """How many rows are due at ``now_ms``: those whose ingest time ``start + floor(n * 1000 / rate)`` has come.

    >>> due(1_000, 1_000, 5000), due(1_001, 1_000, 5000), due(999, 1_000, 5000), due(2_000, 1_000, 1)
    (5, 10, 0, 2)
    """
    if now_ms < start_ms:
        return 0
    return ((now_ms - start_ms + 1) * rate + 999) // 1000


def rows_of(offset: dict | None) -> int:
    """The rows an offset stands for (a checkpoint of the rate source is refused before start: ``check_checkpoint``).

    >>> rows_of({"n": 12}), rows_of(None)
    (12, 0)
    """
    return int((offset or {}).get("n", 0))


class SequencePartition(InputPartition):
    """Sequence numbers ``first`` .. ``end - 1``."""

    def __init__(self, first: int, end: int):
        self.first, self.end = first, end

    def __repr__(self) -> str:
        return f"SequencePartition({self.first} .. {self.end - 1})"


def split(first: int, end: int, parts: int) -> list[SequencePartition]:
    """``first .. end - 1`` in at most ``parts`` contiguous, non-empty partitions of near-equal size.

    >>> split(0, 10, 3)
    [SequencePartition(0 .. 2), SequencePartition(3 .. 5), SequencePartition(6 .. 9)]
    >>> split(5, 6, 4)
    [SequencePartition(5 .. 5)]
    """
    count = end - first
    parts = max(1, min(parts, count))
    bounds = [first + count * i // parts for i in range(parts + 1)]
    return [SequencePartition(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


class _PacedReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets on the driver (no state beyond the spec: due rows are a function of the clock); ``read`` on executors."""

    def __init__(self, spec: dict[str, Any]):
        self.start_ms, self.rate = int(spec["start_ms"]), int(spec["rate"])
        self.max_per_batch: int | None = spec.get("max_per_batch")
        self.partition_count = int(spec["partitions"])
        #: the last row the run reads (--max-events); an available-now trigger lowers it to what was due
        self._until: int | None = spec.get("until")

    def _due(self) -> int:
        rows = due(int(time.time() * 1000), self.start_ms, self.rate)
        return rows if self._until is None else min(rows, self._until)

    def initialOffset(self) -> dict:
        return {"n": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_per_batch) if self.max_per_batch else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._until = self._due()  # what is due now, within --max-events

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = rows_of(start)
        end = max(begin, self._due())
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + limit.max_rows)
        return {"n": end}

    def reportLatestOffset(self) -> dict:
        return {"n": self._due()}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return split(rows_of(start), rows_of(end), self.partition_count)  # type: ignore[return-value]

    def read(self, partition: SequencePartition) -> Iterator:  # type: ignore[override]
        import numpy as np
        import pyarrow as pa

        for first in range(partition.first, partition.end, ROWS_PER_ARROW_BATCH):
            numbers = np.arange(first, min(first + ROWS_PER_ARROW_BATCH, partition.end), dtype=np.int64)
            yield pa.RecordBatch.from_arrays([pa.array(numbers)], names=["n"])

    def commit(self, end: dict) -> None:
        pass


class PacedSequence(DataSource):
    """Spark's view of the paced sequence; option ``spec`` (JSON: start_ms, rate, max_per_batch, until, partitions)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _PacedReader(json.loads(self.options["spec"]))
