"""Trips, congestion and count windows as streams equal the same functions on the same events in batch."""

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from tests.helpers import batch_output

# 180 vehicles at 200 events/s: a ping per vehicle every 0.9 s, jittered by up to 0.5 s, so a 1 s gap
# splits trips now and then; the 1 s watermark covers the jitter, so no event is late.
SOURCE = ("generator://?seed=5&start=2026-11-22T10:00:00Z&rate=200&vehicles=180&late=0&disorder=500ms"
          "&rows_per_batch=900")


STREAMED = {"trips": "append", "count-windows": "append", "congestion": "complete"}


@pytest.fixture(scope="module")
def streamed(spark, tmp_path_factory):
    """One run of the three outputs, each in a query of its own, as three runs of one output each would
    write them: by output, (what the stream wrote, the static run, the stream's final watermark)."""
    s = RunSettings(job="fleet", source=SOURCE, max_events=1800, state_dir=str(tmp_path_factory.mktemp("sw") / "state"),
                    watermark="1s", trip_gap="1s", count_window=3,
                    sinks={o: f"memory:sw_{o.replace('-', '_')}" for o in STREAMED}, output_mode=STREAMED)
    summary = Run(spark, plan_run(s)).start_and_wait()
    assert summary.stopped_by == "--max-events 1800"
    assert sorted(q.output for q in summary.queries) == sorted(STREAMED)
    return {q.output: (spark.table(f"sw_{q.output.replace('-', '_')}"), batch_output(spark, s, q.output),
                       F.lit(q.watermark).cast("timestamp")) for q in summary.queries}


def test_trips_stream_equals_batch(streamed):
    got, expected, watermark = streamed["trips"]
    # append mode: a trip comes out once the watermark passes its last ping plus the gap
    closed = expected.where(F.col("trip_end") + F.expr("INTERVAL 1 SECOND") <= watermark)
    assert got.count() > 150 and got.where("pings > 1 and distance_km > 0").count() > 80
    assertDataFrameEqual(got, closed, rtol=1e-9)


def test_trips_of_vehicles_that_never_pause_close_at_the_max_trip_length(spark, tmp_path):
    # a ping per vehicle every 2.5 s (jittered by 0.5 s) over 25 s: no 4 s pause ever ends a trip,
    # so without --max-trip no trip would ever close; with 10 s, each closes after its cut
    source = SOURCE.replace("rate=200", "rate=72")
    s = RunSettings(job="fleet", source=source, max_events=1800, state_dir=str(tmp_path / "state"),
                    watermark="1s", trip_gap="4s", max_trip="10s", sinks={"trips": "memory:sw_capped_trips"})
    summary = Run(spark, plan_run(s)).start_and_wait()
    got = spark.table("sw_capped_trips")
    cut = F.floor(F.unix_millis(F.col("trip_start")) / 10_000)
    assert got.count() >= 180 and got.where(cut != F.floor(F.unix_millis(F.col("trip_end")) / 10_000)).count() == 0
    watermark = F.lit(summary.queries[0].watermark).cast("timestamp")
    closed = batch_output(spark, s, "trips").where(F.col("trip_end") + F.expr("INTERVAL 4 SECONDS") <= watermark)
    assertDataFrameEqual(got, closed, rtol=1e-9)


def test_count_windows_stream_equals_batch(streamed):
    got, expected, watermark = streamed["count-windows"]
    # a window comes out once the watermark passes its last ping
    assert got.count() > 300
    assertDataFrameEqual(got, expected.where(F.col("window_end") <= watermark), rtol=1e-9)


def test_congestion_stream_equals_batch_in_complete_mode(streamed):
    got, expected, _ = streamed["congestion"]
    assert got.count() >= 2  # the last batch holds every zone-minute
    assertDataFrameEqual(got, expected, rtol=1e-9)
