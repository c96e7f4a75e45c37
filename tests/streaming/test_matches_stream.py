"""Ride matching as a stream: equal to the same function on static DataFrames; the join's state stays bounded."""

import os
from datetime import datetime, timezone

from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from speedlayer.sources import open_source
from tests.helpers import batch_output

START = "2026-11-22T10:00:00Z"
T0 = datetime(2026, 11, 22, 10, 0, 0, tzinfo=timezone.utc).timestamp()


def land(spark, directory, uri, count, files):
    """The generator's first ``count`` payloads as ``files`` JSON-lines files, in event order."""
    directory.mkdir()
    raw = open_source(uri).read_batch(spark, count)
    values = [r.value for r in raw.orderBy(F.col("offset").cast("long")).collect()]
    per = -(-count // files)
    for i in range(files):
        path = directory / f"{i}.jsonl"
        path.write_text("\n".join(values[i * per:(i + 1) * per]) + "\n")
        os.utime(path, (T0 + 60 + i, T0 + 60 + i))
    return directory


def test_stream_matches_equal_the_static_function(spark, tmp_path):
    pings = land(spark, tmp_path / "pings", f"generator://?seed=5&start={START}&rate=100&vehicles=20&late=0", 2400, 3)
    rides = land(spark, tmp_path / "rides",
                 f"generator://?kind=rides&seed=5&start={START}&rate=5&vehicles=20&late=0&malformed=0.05", 120, 3)
    s = RunSettings(job="fleet", source=f"files://{pings}?max_files_per_trigger=1",
                    rides=f"files://{rides}?max_files_per_trigger=1", trigger="available-now",
                    sinks={"matches": "memory:matches_stream", "ride-dead-letters": "memory:matches_dead"},
                    state_dir=str(tmp_path / "state"))
    summary = Run(spark, plan_run(s)).start_and_wait()
    assert {q.output: q.batches for q in summary.queries}["matches"] >= 3

    expected = batch_output(spark, s, "matches")
    assert expected.count() > 500
    assert expected.select("request_id").distinct().count() > 100  # nearly every request has candidates
    assertDataFrameEqual(spark.table("matches_stream"), expected)
    dead = batch_output(spark, s, "ride-dead-letters")
    assert dead.count() > 0
    assertDataFrameEqual(spark.table("matches_dead"), dead)


def test_the_joins_state_stops_growing(spark, tmp_path):
    """Each batch brings 6 s of both streams; the join keeps about watermark + --match-within of them
    (5 s + 5 s, plus the batch that moves the watermark), so it stops growing within a few batches."""
    source = f"generator://?seed=6&start={START}&rate=100&vehicles=20&late=0&rows_per_batch=600"
    rides = f"generator://?kind=rides&seed=6&start={START}&rate=5&vehicles=20&late=0&rows_per_batch=30"
    s = RunSettings(job="fleet", source=source, rides=rides, max_events=4800, match_within="5s",
                    sinks={"matches": "memory:matches_bounded"}, state_dir=str(tmp_path / "state"))
    run = Run(spark, plan_run(s))
    summary = run.start_and_wait()
    assert summary.stopped_by == "--max-events 4800"  # the pings, the join's first source, are counted
    progress = [p for p in run.queries[0].recentProgress if p["stateOperators"]]
    join = [next(op for op in p["stateOperators"] if op["operatorName"] == "symmetricHashJoin") for p in progress]
    rows = [op["numRowsTotal"] for op in join]
    assert len(rows) >= 10, rows  # 8 batches of events, then the flush
    taken_in = sum(p["numInputRows"] for p in progress)
    assert max(rows[4:]) <= 1.2 * rows[3], rows  # after ~20 s of event time it holds steady
    assert rows[-3] < taken_in / 2, (rows, taken_in)
