"""The fleet job's ``windows`` output written by hand in plain PySpark, for the throughput benchmark.

This is what a user would write without speedlayer: ``from_json`` into a typed schema, a 5 s
watermark, ``dropDuplicatesWithinWatermark(["event_id"])``, the zone speed limit as a CASE WHEN
over the zones table, and 10 s tumbling windows per vehicle, in append mode. No validation and
no dead letters: a payload that fails to parse simply becomes a row of nulls.

The one thing it borrows from speedlayer is its *input*: ``raw_stream``/``raw_batch`` call
``speedlayer.pipelines.fleet.vehicle_kind.vehicle_events`` on Spark's ``rate-micro-batch`` source (or
``spark.range``), so both sides of the benchmark read byte-for-byte the same JSON payloads.
The zones come from the same CSV file speedlayer ships (data, not code).

``plain_windows`` works on a stream and, for the equal-results check, on a static DataFrame (where
it drops every duplicate with ``dropDuplicates``, as Spark refuses the watermark form in batch).
"""

from __future__ import annotations

import csv
from importlib import resources

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

WATERMARK = "5 seconds"
WINDOW = "10 seconds"

EVENT_SCHEMA = T.StructType(
    [
        T.StructField("event_id", T.StringType()),
        T.StructField("vehicle_id", T.StringType()),
        T.StructField("event_time", T.TimestampType()),
        T.StructField("speed_kmh", T.DoubleType()),
        T.StructField("lat", T.DoubleType()),
        T.StructField("lon", T.DoubleType()),
    ]
)


def load_zone_rows() -> list[dict[str, str]]:
    """Rows of the zones CSV shipped in the speedlayer package (first matching rectangle wins)."""
    text = resources.files("speedlayer.data").joinpath("zones.csv").read_text()
    return list(csv.DictReader(text.splitlines()))


def speed_limit(lat: Column, lon: Column, zones: list[dict[str, str]]) -> Column:
    """CASE WHEN lat/lon inside zone 1 THEN limit 1 WHEN ... END, as a user would hand-write it."""
    expr = None
    for z in zones:
        inside = lat.between(float(z["min_lat"]), float(z["max_lat"])) & lon.between(float(z["min_lon"]), float(z["max_lon"]))
        limit = F.lit(float(z["speed_limit_kmh"]))
        expr = F.when(inside, limit) if expr is None else expr.when(inside, limit)
    return expr


def plain_windows(raw: DataFrame) -> DataFrame:
    """Per-vehicle 10 s windows from RAW rows (a ``value`` column holding the JSON payload)."""
    events = raw.select(F.from_json("value", EVENT_SCHEMA).alias("e")).select("e.*")
    if events.isStreaming:
        events = events.withWatermark("event_time", WATERMARK).dropDuplicatesWithinWatermark(["event_id"])
    else:  # the batch version, for the equal-results check (Spark refuses the watermark form in batch)
        events = events.dropDuplicates(["event_id"])
    events = events.withColumn("speed_limit_kmh", speed_limit(F.col("lat"), F.col("lon"), load_zone_rows()))
    over = F.when(F.col("speed_kmh") > F.col("speed_limit_kmh"), 1).otherwise(0)
    windows = events.groupBy(F.window("event_time", WINDOW), "vehicle_id").agg(
        F.count(F.lit(1)).alias("events"),
        F.avg("speed_kmh").alias("avg_speed_kmh"),
        F.max("speed_kmh").alias("max_speed_kmh"),
        F.sum(over).cast("long").alias("over_limit_events"),
    )
    return windows.select(
        F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
        "vehicle_id", "events", "avg_speed_kmh", "max_speed_kmh", "over_limit_events",
    )


def _generator(uri: str):
    # Only to produce the identical input: the generator's options and event-time origin.
    from speedlayer.sources import open_source

    source = open_source(uri)
    if source.start_ms is None:
        raise ValueError("give the generator a fixed start= so that both sides read the same events")
    return source


def raw_stream(spark: SparkSession, uri: str) -> DataFrame:
    """RAW rows from ``rate-micro-batch`` (the generator URI must have rows_per_batch and start)."""
    from speedlayer.pipelines.fleet.vehicle_kind import vehicle_events

    source = _generator(uri)
    opts = source.options
    if not opts.rows_per_batch:
        raise ValueError("the benchmark needs rows_per_batch= in the generator URI")
    reader = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", opts.rows_per_batch)
    if opts.partitions:
        reader = reader.option("numPartitions", opts.partitions)
    seq = reader.load().select(F.col("value").alias("n"))
    return vehicle_events(seq, opts, source.start_ms)


def raw_batch(spark: SparkSession, uri: str, events: int) -> DataFrame:
    """The same RAW rows for events 0 .. events-1 as a static DataFrame."""
    from speedlayer.pipelines.fleet.vehicle_kind import vehicle_events

    source = _generator(uri)
    seq = spark.range(0, events, numPartitions=source.options.partitions or spark.sparkContext.defaultParallelism)
    return vehicle_events(seq.select(F.col("id").alias("n")), source.options, source.start_ms)
