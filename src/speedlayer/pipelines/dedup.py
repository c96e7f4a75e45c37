"""Re-sent events dropped by key (a field, or several together), one way for every job; which copy counts (``--dedup``).

- On a static DataFrame (batch, tests, backfills) the copy with the lowest offset
  (``speedlayer.core.offsets``) of each key is kept.
- On a stream with ``dedup="exact"`` (the default): the lowest-offset copy that is not late;
  a key an earlier batch took (within the watermark) is dropped. Rows are partitioned by key, each
  partition goes through Arrow to Python (``lowest_offset_first``), which puts every key's copies
  in offset order, and Spark's ``dropDuplicatesWithinWatermark`` keeps the first copy it meets.
  Every replay of a batch keeps the same copy, on any cluster (see ``_exact_stream``).
- On a stream with ``dedup="fast"``: ``dropDuplicatesWithinWatermark`` alone keeps whichever copy
  it meets first, which after a shuffle on a cluster can depend on the order blocks arrive in.
  Byte-for-byte re-sends give the same rows either way.

A stream equals the batch recomputation when offsets grow with arrival (one partition, a
generator); when a copy with a lower offset arrives in a later batch (another file or partition),
the stream keeps the earlier batch's copy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from speedlayer.core.errors import ConfigError
from speedlayer.core.keys import key_fields
from speedlayer.core.offsets import offset_order_column, offset_rank
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


def offset_order_permutation(keys: list, offsets: list) -> list[int]:
    """A reordering of rows in which each key's copies keep their places but come in offset order.

    >>> offset_order_permutation(["a", "b", "a"], ["f:10", "f:11", "f:9"])
    [2, 1, 0]
    """
    places: dict = {}
    for i, key in enumerate(keys):
        places.setdefault(key, []).append(i)
    order = list(range(len(keys)))
    for rows in places.values():
        if len(rows) > 1:
            for place, row in zip(rows, sorted(rows, key=lambda i: offset_rank(offsets[i]))):
                order[place] = row
    return order


def lowest_offset_first(key: str | Sequence[str]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function that puts the copies of each ``key`` (a field, or several together) in
    a partition in offset order.

    Every row comes out (without ``offset``); only rows of keys that occur more than once are
    moved, and only their offsets become Python objects. It holds the whole partition before it writes.

    >>> events.repartition("event_id").mapInArrow(lowest_offset_first("event_id"), schema)  # doctest: +SKIP
    """
    fields = list(key_fields(key))

    def reorder(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = [b for b in batches if b.num_rows]
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        rows = pa.array(range(table.num_rows), pa.int64())
        copies = (table.select(fields).append_column("__row", rows).group_by(fields, use_threads=False)
                  .aggregate([("__row", "list")]).column("__row_list").combine_chunks())  # each key's row numbers
        repeated = copies.filter(pc.greater(pc.list_value_length(copies), 1))
        if len(repeated):
            at, key_of = pc.list_flatten(repeated), pc.list_parent_indices(repeated)
            ascending = pc.sort_indices(at)  # each key's rows keep their places, in the table's order
            at, key_of = at.take(ascending), key_of.take(ascending)
            moved = offset_order_permutation(key_of.to_pylist(), table.column("offset").take(at).to_pylist())
            order = rows.to_numpy().copy()
            places = at.to_numpy()
            order[places] = places[moved]
            table = table.take(pa.array(order))
        yield from table.drop_columns(["offset"]).to_batches()

    return reorder


def _lowest_offset_static(events: DataFrame, fields: tuple[str, ...]) -> DataFrame:
    order = Window.partitionBy(*fields).orderBy(offset_order_column(F.col("offset")).asc_nulls_last(),
                                                F.col("offset").asc_nulls_last())
    return events.withColumn("_copy", F.row_number().over(order)).where(F.col("_copy") == 1).drop("_copy", "offset")


def _exact_stream(events: DataFrame, params: Params, fields: tuple[str, ...]) -> DataFrame:
    """Each key's copies in offset order within its partition, then Spark's dedup, which keeps the
    first copy it meets that is not late.

    All copies of a key sit in one partition, so they reach the dedup in one shuffle block, whose
    order Spark keeps (its shuffle writers sort by partition only, stably; a block is read in
    order): the order blocks arrive in cannot change which copy comes first. Every copy reaches
    the dedup, so Spark's late filter and its duplicate and late counters see what they see in
    fast mode.
    """
    # the fields keep their metadata, so the event-time column stays the watermark's
    schema = T.StructType([f for f in events.schema.fields if f.name != "offset"])
    return events.repartition(*fields).mapInArrow(lowest_offset_first(fields), schema).dropDuplicatesWithinWatermark(list(fields))


def drop_duplicates(events: DataFrame, params: Params, key: str | Sequence[str] = "event_id") -> DataFrame:
    """Drop re-sent copies by ``key``, a field or several together (a composite key): within the
    watermark on a stream, all of them in batch.

    Which copy counts: see the module's docstring. A DataFrame without an ``offset`` column (one
    made by hand) keeps any copy. The ``offset`` column is dropped; in continuous and real-time mode (no state)
    nothing else is.

    >>> drop_duplicates(events.withWatermark("event_time", "5 seconds"), Params(dedup="exact")).columns  # doctest: +SKIP
    ['event_id', 'vehicle_id', 'event_time', 'speed_kmh', 'lat', 'lon', 'ingest_time']
    >>> drop_duplicates(readings, params, ("device_id", "reading_time"))  # doctest: +SKIP
    """
    fields = key_fields(key)
    has_offset = "offset" in events.columns
    if params.stateless:
        return events.drop("offset")
    if not events.isStreaming:
        return _lowest_offset_static(events, fields) if has_offset else events.dropDuplicates(list(fields))
    if check_dedup(params.dedup) == "exact" and has_offset:
        return _exact_stream(events, params, fields)
    return events.drop("offset").dropDuplicatesWithinWatermark(list(fields))
