"""Re-sent events dropped by key, one way for every job; which copy counts (``--dedup``).

- On a static DataFrame (batch, tests, backfills) the copy with the lowest offset
  (``speedlayer.offsets``) of each key is kept.
- On a stream with ``dedup="exact"``: of the copies in one micro-batch, the lowest offset; a key
  an earlier batch took (within the watermark) is dropped. Rows are partitioned by key, each
  partition's keys and offsets go through Arrow to Python (``lowest_offset_flags``), and only the
  lowest-offset copies reach Spark's ``dropDuplicatesWithinWatermark``, which so meets one copy
  per key and batch. Every replay of a batch keeps the same copy, on any cluster.
- On a stream with ``dedup="fast"`` (the default): ``dropDuplicatesWithinWatermark`` alone keeps
  whichever copy it meets first, which after a shuffle on a cluster can depend on the order
  blocks arrive in. Byte-for-byte re-sends give the same rows either way.

A stream equals the batch recomputation when offsets grow with arrival (one partition, a
generator); when a copy with a lower offset arrives in a later batch (another file or partition),
the stream keeps the earlier batch's copy.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

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


def lowest_offset_flags(batches: Iterator[tuple[pa.Array, pa.Array]]) -> Iterator[pa.Array]:
    """Of (key, offset) batches of one partition, whether each row is its key's lowest-offset copy.

    Reads the whole partition before it answers (a copy may come last), one answer array per
    batch; only rows of keys that occur more than once become Python objects. Spark keeps the rows
    themselves meanwhile (``ArrowEvalPythonExec`` queues them, spilling to disk).

    >>> [a.to_pylist() for a in lowest_offset_flags(iter([(pa.array(["x", "y"]), pa.array(["f:10", "f:1"])),
    ...                                                   (pa.array(["x"]), pa.array(["f:9"]))]))]
    [[False, True], [True]]
    """
    batches = list(batches)
    if not batches:
        return
    keys = pa.concat_arrays([k for k, _ in batches])
    counts = pc.value_counts(keys)
    repeated = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
    keep = pc.invert(pc.is_in(keys, value_set=repeated)).to_numpy(zero_copy_only=False).copy()
    if len(repeated):
        at = pc.indices_nonzero(pc.is_in(keys, value_set=repeated)).to_numpy()
        offsets = pa.concat_arrays([o for _, o in batches]).take(pa.array(at))
        dropped = set(not_lowest(keys.take(pa.array(at)).to_pylist(), offsets.to_pylist()))
        keep[[i for n, i in enumerate(at) if n not in dropped]] = True
    start = 0
    for k, _ in batches:
        yield pa.array(keep[start:start + len(k)], pa.bool_())
        start += len(k)


def _lowest_offset_static(events: DataFrame, key: str) -> DataFrame:
    order = Window.partitionBy(key).orderBy(offset_order_column(F.col("offset")).asc_nulls_last(),
                                            F.col("offset").asc_nulls_last())
    return events.withColumn("_copy", F.row_number().over(order)).where(F.col("_copy") == 1).drop("_copy", "offset")


def _exact_stream(events: DataFrame, params: Params, key: str) -> DataFrame:
    """The lowest-offset copy of each key per micro-batch, then Spark's dedup across batches.

    Only key and offset go to Python; the rows stay in the JVM, partitioned by the key as the
    dedup needs them (no second shuffle). The flag depends on the partition's other rows, so it is
    marked nondeterministic: Spark must not move the filter below the repartition.
    """
    lowest = F.arrow_udf(lowest_offset_flags, "boolean").asNondeterministic()
    return (events.repartition(key).where(lowest(F.col(key), F.col("offset"))).drop("offset")
            .dropDuplicatesWithinWatermark([key]))


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
