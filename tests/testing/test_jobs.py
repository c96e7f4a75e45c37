"""assert_stream_equals_batch: passes on a job whose stream equals its batch, fails on one that cannot."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from speedlayer.core.errors import ConfigError
from speedlayer.core.modes import APPEND, COMPLETE, UPDATE
from speedlayer.pipelines.base import DEAD_LETTERS, Job, Output
from speedlayer.pipelines.fleet import FLEET
from speedlayer.testing import NothingCompared, StreamBatchMismatch, assert_stream_equals_batch
from tests.testing.events import INGEST, ping

#: three micro-batches, two vehicles, one speeding ping, one re-sent ping, one payload that is not JSON
BATCHES = [
    [ping("a", 0), ping("b", 4, 72.0), ping("c", 12, vehicle="V2")],
    [ping("d", 15), ping("b", 4, 72.0), "{not json", ping("e", 21, vehicle="V2")],
    [ping("f", 33), ping("g", 47, vehicle="V2")],
]


def test_the_fleet_job_agrees_stream_and_batch(spark):
    report = assert_stream_equals_batch(spark, "fleet", BATCHES, ["windows", "dead-letters"], ingest_time=INGEST,
                                        watermark="5s")
    windows, dead = report["windows"], report["dead-letters"]
    # under the final watermark (47 s - 5 s) V1's [0,10) [10,20) [30,40) and V2's [10,20) [20,30) have closed;
    # V2's [40,50) has not, so the batch run's row of it is held back
    assert (windows.mode, windows.rows, windows.held_back, windows.watermark) == (APPEND, 5, 1, "2026-11-22T10:00:42.000Z")
    assert (dead.mode, dead.rows, dead.held_back) == (APPEND, 1, 0)


def test_wordcount_agrees_in_complete_and_update_mode_on_text_lines(spark):
    lines = [["2026-11-22T10:00:01Z To be, or not to be", "2026-11-22T10:00:15Z be quick"], ["2026-11-22T10:00:31Z not now"]]
    report = assert_stream_equals_batch(spark, "wordcount", lines, ["totals", "windows"], ingest_time=INGEST)
    assert (report["totals"].mode, report["totals"].rows) == (COMPLETE, 6)  # to, be, or, not, quick, now
    # every (30 s window, word) pair: the stream's latest row of each, none held back
    assert (report["windows"].mode, report["windows"].rows, report["windows"].held_back) == (UPDATE, 22, 0)


def with_clock(job: Job) -> Job:
    """The fleet job with an output stamped with the time the row was computed: processing time."""
    def pipeline(events, params, **inputs):
        return {"seen": events.select("event_id", F.current_timestamp().alias("seen_at"))}

    seen = Output("seen", "events and when they were computed", (APPEND,), APPEND, False, ("event_id",))
    return Job(name="clocked", summary="reads the clock", schema=job.schema, pipeline=pipeline,
               outputs={"seen": seen, "dead-letters": DEAD_LETTERS}, default_outputs=("seen",))


def test_a_pipeline_that_reads_the_clock_fails_naming_its_output(spark):
    with pytest.raises(StreamBatchMismatch, match=r"output 'seen' \(append mode\): the stream gave other rows") as err:
        assert_stream_equals_batch(spark, with_clock(FLEET), BATCHES[:1], ingest_time=INGEST)
    assert "current_timestamp" in str(err.value)


def test_a_window_the_watermark_never_closed_is_nothing_compared(spark):
    with pytest.raises(NothingCompared, match="closed none of the 1 rows"):
        assert_stream_equals_batch(spark, FLEET, [ping("a", 0)], ["windows"], ingest_time=INGEST)


def test_misuse_is_refused_before_spark_runs():
    with pytest.raises(ConfigError, match="has no output 'nope'"):
        assert_stream_equals_batch(None, "fleet", [ping("a", 0)], ["nope"])
    with pytest.raises(ConfigError, match="reads a second stream"):
        assert_stream_equals_batch(None, "fleet", [ping("a", 0)], ["matches"])
    with pytest.raises(ConfigError, match="mixes single events and lists"):
        assert_stream_equals_batch(None, "fleet", [ping("a", 0), [ping("b", 1)]])
    with pytest.raises(ConfigError, match="set source themselves: drop source="):
        assert_stream_equals_batch(None, "fleet", [ping("a", 0)], source="generator://")
