"""The console sink's view of a batch: its newest rows and its count, from one pass over the batch."""

from pyspark.sql import functions as F

from speedlayer.sinks.console import newest_rows


def test_newest_rows_reads_the_batch_once(spark):
    """A batch is its query's whole plan (state operators included): reading it twice would run them twice."""
    reads = spark.sparkContext.accumulator(0)

    @F.udf("long")
    def counted(n):
        reads.add(1)
        return n

    batch = spark.range(0, 500, numPartitions=4).select(
        counted("id").alias("n"), F.timestamp_seconds(F.col("id")).alias("event_time"))

    view = newest_rows(batch, 7, "fleet", "alerts", 3)

    assert (view.total, [row[0] for row in view.rows]) == (500, [499, 498, 497])
    assert reads.value == 500
