"""The console sink's view of a batch: its newest rows and its count, from one pass over the batch."""

import pytest
from pyspark.sql import functions as F

from speedlayer.sinks.console import newest_rows


@pytest.mark.parametrize("with_time", [True, False], ids=["newest by time", "no time column"])
def test_newest_rows_counts_every_row_and_reads_the_batch_once(spark, with_time):
    """A batch is its query's whole plan (state operators included): reading it twice would run them twice.
    Without a time column the rows shown are any 3, but the count is still the whole batch's."""
    reads = spark.sparkContext.accumulator(0)

    @F.udf("long")
    def counted(n):
        reads.add(1)
        return n

    batch = spark.range(0, 500, numPartitions=4).select(counted("id").alias("n"))
    if with_time:
        batch = batch.withColumn("event_time", F.timestamp_seconds(F.col("n")))

    view = newest_rows(batch, 7, "fleet", "alerts", 3)

    assert view.total == 500 and len(view.rows) == 3
    if with_time:
        assert [row[0] for row in view.rows] == [499, 498, 497]
    assert reads.value == 500


def test_an_empty_batch_shows_no_rows_and_a_count_of_zero(spark):
    batch = spark.range(0).select(F.timestamp_seconds(F.col("id")).alias("event_time"))
    view = newest_rows(batch, 0, "fleet", "alerts", 20)
    assert (view.total, view.rows, view.columns) == (0, [], ["event_time"])
