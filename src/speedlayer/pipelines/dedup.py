"""Re-sent events dropped by key, one way for every job; which copy counts (``--dedup``).

- On a static DataFrame (batch, tests, backfills) the copy with the lowest offset
  (``speedlayer.offsets``) of each key is kept.
- On a stream with ``dedup="exact"``: of the copies in one micro-batch, the lowest offset; a key
  an earlier batch took (within the watermark) is dropped. Rows are partitioned by key and the
  copy is chosen with Arrow (``lowest_offset_copies``) before Spark's
  ``dropDuplicatesWithinWatermark``, which then meets one copy per key and batch. Every replay of
  a batch keeps the same copy, on any cluster.
- On a stream with ``dedup="fast"`` (the default): ``dropDuplicatesWithinWatermark`` alone keeps
  whichever copy it meets first, which after a shuffle on a cluster can depend on the order
  blocks arrive in. Byte-for-byte re-sends give the same rows either way.

A stream equals the batch recomputation when offsets grow with arrival (one partition, a
generator); when a copy with a lower offset arrives in a later batch (another file or partition),
the stream keeps the earlier batch's copy.
"""

from __future__ import annotations

from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from speedlayer.errors import ConfigError
from speedlayer.offsets import offset_order_column, offset_rank
from speedlayer.pipelines.base import Params

DEDUP_MODES = ("fast", "exact")


def check_dedup(mode: str) -> str:
    """The dedup mode, or a ConfigError naming the choices.

    >>> check_dedup("exact")
    'exact'
    """
    if mode not in DEDUP_MODES:
        raise ConfigError(f"unknown dedup mode {mode!r}: use exact (a re-sent event's lowest-offset copy counts) "
                          "or fast (whichever copy Spark meets first)")
    return mode


def not_lowest(keys: list, offsets: list) -> list[int]:
    """Positions of the rows that are not their key's lowest-offset copy.

    >>> not_lowest(["a", "b", "a"], ["f:10", "f:11", "f:9"])
    [0]
    """
    best: dict = {}
    for i, (key, offset) in enumerate(zip(keys, offsets)):
        if key not in best or offset_rank(offset) < offset_rank(offsets[best[key]]):
            best[key] = i
    kept = set(best.values())
    return [i for i in range(len(keys)) if i not in kept]


def lowest_offset_copies(key: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function keeping, of each ``key`` in a partition, the lowest-offset copy.

    It holds the whole partition before it writes (a copy may come last); only the rows of keys
    that occur more than once become Python objects. The ``offset`` column is dropped.

    >>> events.repartition("event_id").mapInArrow(lowest_offset_copies("event_id"), schema)  # doctest: +SKIP
    """
    def choose(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = [b for b in batches if b.num_rows]
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        keys = table.column(key)
        counts = pc.value_counts(keys)
        repeated = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
        if len(repeated):
            at = pc.indices_nonzero(pc.is_in(keys, value_set=repeated))
            drop = at.take(pa.array(not_lowest(keys.take(at).to_pylist(), table.column("offset").take(at).to_pylist()),
                                    pa.int64()))
            table = table.filter(pc.invert(pc.is_in(pa.array(range(table.num_rows), pa.uint64()), value_set=drop)))
        yield from table.drop_columns(["offset"]).to_batches()

    return choose


def _lowest_offset_static(events: DataFrame, key: str) -> DataFrame:
    order = Window.partitionBy(key).orderBy(offset_order_column(F.col("offset")).asc_nulls_last(),
                                            F.col("offset").asc_nulls_last())
    return events.withColumn("_copy", F.row_number().over(order)).where(F.col("_copy") == 1).drop("_copy", "offset")


def _exact_stream(events: DataFrame, params: Params, key: str) -> DataFrame:
    """The lowest-offset copy of each key per micro-batch, then Spark's dedup across batches."""
    # the fields keep their metadata, so the event-time column stays the watermark's
    chosen = T.StructType([f for f in events.schema.fields if f.name != "offset"])
    return events.repartition(key).mapInArrow(lowest_offset_copies(key), chosen).dropDuplicatesWithinWatermark([key])


def drop_duplicates(events: DataFrame, params: Params, key: str = "event_id") -> DataFrame:
    """Drop re-sent copies by ``key``: within the watermark on a stream, all of them in batch.

    Which copy counts: see the module's docstring. A DataFrame without an ``offset`` column (one
    made by hand) keeps any copy. The ``offset`` column is dropped; in continuous mode (no state)
    nothing else is.

    >>> drop_duplicates(events.withWatermark("event_time", "5 seconds"), Params(dedup="exact")).columns  # doctest: +SKIP
    ['event_id', 'vehicle_id', 'event_time', 'speed_kmh', 'lat', 'lon', 'ingest_time']
    """
    has_offset = "offset" in events.columns
    if params.continuous:
        return events.drop("offset")
    if not events.isStreaming:
        return _lowest_offset_static(events, key) if has_offset else events.dropDuplicates([key])
    if check_dedup(params.dedup) == "exact" and has_offset:
        return _exact_stream(events, params, key)
    return events.drop("offset").dropDuplicatesWithinWatermark([key])
