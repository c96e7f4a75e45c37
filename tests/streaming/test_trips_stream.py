"""The fleet job's trips output as a real query: its state does not grow with a trip, and its rows are the oracle's.

Trips used to be Spark's session windows, whose state held each open trip's whole path and wrote
it again every batch in which the vehicle pinged; the processor keeps a start, a last ping and sums.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone

import pytest
from pyspark.sql import functions as F

from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from tests import oracle
from tests.helpers import assert_refused_for_its_state_layout, batch_output, land_files

T0 = datetime(2026, 11, 22, 10, 0)  # naive UTC, as the oracle takes it


def state_bytes_written(progress: list[dict]) -> list[int]:
    """Bytes the trips operator wrote to its state store in each batch (the dedup before it is left out)."""
    ops = [[op for op in p["stateOperators"] if "dedup" not in op["operatorName"].lower()] for p in progress]
    return [op[0]["customMetrics"]["rocksdbTotalBytesWritten"] for op in ops if op]


def test_the_state_written_per_batch_does_not_grow_with_the_trip(spark, tmp_path):
    """One vehicle pinging twice a second for 8 batches of 5 s each: one trip of 80 pings that never ends.

    Measured: 3,984 to 4,024 bytes written each batch from the third on. Spark's session windows,
    which computed trips before, wrote the whole path every batch: 1,383 bytes in the third batch,
    400 more each batch after (3,391 in the eighth); this test failed on them.
    """
    source = ("generator://?seed=3&start=2026-11-22T10:00:00Z&rate=2&vehicles=1&late=0&duplicates=0&malformed=0"
              "&disorder=200ms&rows_per_batch=10")
    s = RunSettings(job="fleet", source=source, max_events=80, state_dir=str(tmp_path / "state"),
                    sinks={"trips": "memory:trips_one_vehicle"})
    run = Run(spark, plan_run(s))
    run.start_and_wait()
    written = state_bytes_written(run.queries[0].recentProgress)[:8]  # the batches that read the 80 events
    # batches 3 to 8, 30 to 80 pings into the trip: the same but for a ping more or less waiting
    assert max(written[2:]) - min(written[2:]) <= 64, written
    assert spark.table("trips_one_vehicle").count() == 0  # the trip is still open: nothing written yet


def line(vehicle: str, t: datetime, speed: float, lat: float, lon: float) -> str:
    return json.dumps({"event_id": f"{vehicle}-{t.isoformat()}", "vehicle_id": vehicle,
                       "event_time": t.isoformat(timespec="milliseconds") + "Z", "speed_kmh": speed, "lat": lat, "lon": lon})


def test_out_of_order_pings_a_gap_and_a_cut_give_the_oracles_trips(spark, tmp_path):
    """Gap 30 s, max trip 2 min, watermark 5 s; three files, one a batch, each out of order inside.

    A drives through the 10:02 cut (two trips); B pauses exactly 30 s (one trip) then 30.001 s (a
    second one); A's ping at 10:01:17 comes a batch after its 10:01:20, still ahead of the
    watermark; C's lone ping comes when the watermark has long passed it (late: no trip); D's moves
    the watermark on so that every other trip ends.
    """
    rng = random.Random(7)
    sec = lambda s: T0 + timedelta(seconds=s)  # noqa: E731
    a = [oracle.Ping("", "A", sec(s), 20.0 + s % 7, 52.50 + s * 1e-4, 13.40) for s in range(30, 181, 10)] + \
        [oracle.Ping("", "A", sec(77), 33.0, 52.5077, 13.41)]
    b = [oracle.Ping("", "B", sec(s), 40.0 + s, 52.45, 13.30 + s * 1e-4) for s in (0, 30, 60.001, 70)]
    c, d = oracle.Ping("", "C", sec(5), 10.0, 52.6, 13.1), oracle.Ping("", "D", sec(300), 10.0, 52.6, 13.2)
    batches = [[p for p in a if p.event_time <= sec(80) and p.event_time != sec(77)] + b,
               [p for p in a if sec(80) < p.event_time <= sec(140) or p.event_time == sec(77)],
               [p for p in a if p.event_time > sec(140)] + [c, d]]
    files = [[line(p.vehicle_id, p.event_time, p.speed_kmh, p.lat, p.lon) for p in rng.sample(ps, len(ps))] for ps in batches]
    land_files(tmp_path / "landing", files, (T0 + timedelta(minutes=10)).replace(tzinfo=timezone.utc))
    s = RunSettings(job="fleet", source=f"files://{tmp_path / 'landing'}?max_files_per_trigger=1", trigger="available-now",
                    trip_gap="30s", max_trip="2min", sinks={"trips": "memory:trips_oracle"}, state_dir=str(tmp_path / "state"))
    summary = Run(spark, plan_run(s)).start_and_wait()
    watermark = datetime.fromisoformat(summary.queries[0].watermark.replace("Z", "+00:00")).replace(tzinfo=None)
    assert watermark == sec(295) and summary.queries[0].batches >= 3

    expected = oracle.trips(a + b + [d], timedelta(seconds=30), timedelta(minutes=2), closed_by=watermark)
    assert sorted((v, start.time().isoformat(), t["pings"]) for (v, start), t in expected.items()) == [
        ("A", "10:00:30", 10), ("A", "10:02:00", 7), ("B", "10:00:00", 2), ("B", "10:01:00.001000", 2)]
    assert_rows_are(spark.table("trips_oracle"), expected)
    # the static run of the same function has no watermark: C's ping and D's trip count there
    assert_rows_are(batch_output(spark, s, "trips"), oracle.trips(a + b + [c, d], timedelta(seconds=30), timedelta(minutes=2)))


def assert_rows_are(df, expected: dict) -> None:
    rows = {(r.vehicle_id, r.trip_start): r.asDict() for r in df.orderBy(F.col("trip_start")).collect()}
    assert sorted(rows) == sorted(expected)
    for key, trip in expected.items():
        got = {k: v for k, v in rows[key].items() if k not in ("vehicle_id", "trip_start")}
        assert got == {**trip, "distance_km": pytest.approx(trip["distance_km"], rel=1e-9, abs=1e-12),
                       "avg_speed_kmh": pytest.approx(trip["avg_speed_kmh"], rel=1e-12)}, key


def test_a_checkpoint_of_the_session_windows_is_refused_in_one_line(spark, tmp_path, monkeypatch):
    """Trips' state written by Spark's session windows (before the processor) stops the run with one line
    that names the checkpoint and says how to start afresh, not Spark's operator mismatch."""
    from speedlayer.pipelines.fleet import trips

    s = RunSettings(job="fleet", source="generator://?seed=5&rate=100&vehicles=20&rows_per_batch=400", max_events=400,
                    sinks={"trips": f"parquet://{tmp_path / 'out'}"}, state_dir=str(tmp_path / "state"))
    with monkeypatch.context() as m:  # the earlier layout: a session window per vehicle
        m.setattr(trips, "trips", lambda events, params: events.groupBy(
            F.session_window("event_time", "5 minutes"), "vehicle_id").agg(F.count(F.lit(1)).alias("pings")))
        assert Run(spark, plan_run(s)).start_and_wait().queries[0].batches >= 1
    assert_refused_for_its_state_layout(spark, s.model_copy(update={"max_events": 800}), "trips")
