"""The generator: reproducible by seed, the raw shape every source has, stream equal to batch."""

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from speedlayer.core.schemas import RAW_SCHEMA
from speedlayer.decode.validate import decode
from speedlayer.pipelines.fleet.schemas import VEHICLE_EVENT
from speedlayer.sources import open_source
from tests.helpers import wait_for_batch

START = "2026-11-22T10:00:00Z"


@pytest.mark.parametrize("kind", ["vehicles", "rides"])
def test_same_seed_same_events_other_seed_other_events(spark, kind):
    a = open_source(f"generator://?kind={kind}&seed=7&start={START}").read_batch(spark, 2000)
    b = open_source(f"generator://?kind={kind}&seed=7&start={START}").read_batch(spark, 2000)
    c = open_source(f"generator://?kind={kind}&seed=8&start={START}").read_batch(spark, 2000)
    assertDataFrameEqual(a, b)
    assert a.exceptAll(c).count() > 1000
    assert [(f.name, f.dataType) for f in a.schema] == [(f.name, f.dataType) for f in RAW_SCHEMA]


def test_fractions_of_faults_are_close_to_what_was_asked(spark):
    n = 20_000
    raw = open_source(f"generator://?seed=1&start={START}&malformed=0.05&duplicates=0.05&late=0&disorder=2s").read_batch(spark, n)
    decoded = decode(raw, VEHICLE_EVENT)
    dead = decoded.dead_letters.count()
    events = decoded.events
    distinct = events.select("event_id").distinct().count()
    assert 0.04 * n < dead < 0.065 * n
    assert 0.035 * n < events.count() - distinct < 0.065 * n
    stats = events.agg(F.min("speed_kmh"), F.max("speed_kmh"), F.min("lat"), F.max("lat"), F.countDistinct("vehicle_id")).first()
    assert stats[0] >= 0 and stats[1] < 250
    assert 52.3 < stats[2] < stats[3] < 52.7  # around Berlin
    assert stats[4] == 2000


def test_event_times_follow_the_rate_with_bounded_disorder(spark):
    source = open_source(f"generator://?seed=2&start={START}&rate=1000&disorder=2s&late=0&malformed=0&duplicates=0")
    raw = source.read_batch(spark, 5000)
    events = decode(raw, VEHICLE_EVENT).events
    lag = events.select((F.col("ingest_time").cast("double") - F.col("event_time").cast("double")).alias("lag"))
    low, high = lag.agg(F.min("lag"), F.max("lag")).first()
    assert low >= 0 and high <= 2.0
    span = events.agg(F.max("event_time").cast("double") - F.min("event_time").cast("double")).first()[0]
    assert 4.0 < span <= 7.0  # 5,000 events at 1,000/s, each up to 2 s early


def test_late_events_lag_far_behind(spark):
    raw = open_source(f"generator://?seed=3&start={START}&late=0.1&late_delay=60s&malformed=0").read_batch(spark, 5000)
    events = decode(raw, VEHICLE_EVENT).events
    late = events.where(F.col("ingest_time").cast("double") - F.col("event_time").cast("double") > 25).count()
    assert 350 < late < 650


def test_stream_yields_exactly_the_batch_rows(spark):
    source = open_source(f"generator://?seed=4&start={START}&rows_per_batch=1500")
    query = source.read_stream(spark, max_events=3000).writeStream.format("memory").queryName("gen_stream").start()
    try:
        wait_for_batch(query, 2)
    finally:
        query.stop()
    assertDataFrameEqual(spark.table("gen_stream"), source.read_batch(spark, 3000))


def test_every_kind_of_corruption_becomes_a_dead_letter_with_its_reason(spark):
    raw = open_source(f"generator://?seed=4&start={START}&malformed=1&duplicates=0&late=0").read_batch(spark, 700)
    decoded = decode(raw, VEHICLE_EVENT)
    assert decoded.events.count() == 0
    reasons = {r.reason for r in decoded.dead_letters.select("reason").distinct().collect()}
    assert reasons == {
        "malformed JSON: not a JSON object",
        "missing field 'vehicle_id'",
        "field 'speed_kmh' is outside [0, 400]",
        "field 'lat' is outside [-90, 90]",
        "field 'speed_kmh' is not a valid double",
        "field 'event_time' is more than 1s ahead of ingest time",
    }


def test_sources_say_how_many_events_a_batch_can_hold():
    assert open_source("generator://?rows_per_batch=5000").batch_rows(0) == 5000
    assert open_source("generator://?rate=2000").batch_rows(5000) == 10_000  # paced: rate x trigger interval
    assert open_source("generator://?rate=2000").batch_rows(0) is None  # back to back: no bound
    assert open_source("generator://?rate=2000&max_per_batch=3000").batch_rows(0) == 3000  # admission control
    assert open_source("generator://?rate=2000&max_per_batch=3000").batch_rows(1000) == 2000
    assert open_source("redis://127.0.0.1:6379/0?stream=v&max_records_per_trigger=300").batch_rows(0) == 300
    assert open_source("kafka://127.0.0.1:9092/telemetry?maxOffsetsPerTrigger=700").batch_rows(0) == 700
    assert open_source("files:///tmp/landing?format=json").batch_rows(1000) is None


def test_events_due_while_spark_starts_are_read_by_the_first_batch(spark, tmp_path, monkeypatch):
    """A fresh run pins the generator's clock right before its queries start; Spark's rate source counts
    from its own first batch, seconds later after a slow start. Events due in between would be readable
    that much after their ingest time. Here the start-up takes 5 s (the clock is read 5 s early): the
    first batch reads the events due over those 5 s."""
    import json

    from speedlayer.runtime.plan import plan_run
    from speedlayer.runtime.run import Run
    from speedlayer.runtime.settings import RunSettings
    from speedlayer.sources import generator

    now = generator._now_ms
    monkeypatch.setattr(generator, "_now_ms", lambda: now() - 5_000)
    settings = RunSettings(job="fleet", source="generator://?seed=5&rate=200&vehicles=20", max_events=600,
                           state_dir=str(tmp_path / "st"), trigger="processing:0s", sinks={"alerts": "memory:"})
    Run(spark, plan_run(settings)).start_and_wait()
    lines = (tmp_path / "st" / "checkpoints" / "alerts" / "offsets" / "0").read_text().splitlines()
    planned_ms, seconds_read = json.loads(lines[1])["batchTimestampMs"], int(lines[2])  # the rate source's offset
    start_ms = json.loads((tmp_path / "st" / "speedlayer-run.json").read_text())["run_state"]["generator_start_ms"]
    assert seconds_read >= 4 and abs(seconds_read - (planned_ms - start_ms) / 1000) < 1.5, (seconds_read, planned_ms - start_ms)
