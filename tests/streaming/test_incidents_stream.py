"""The fleet job's incidents output as a real query: restart from the checkpoint, initial state,
dead letters, and the stream equal to the same function on a static DataFrame."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pandas as pd
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from tests.helpers import assert_refused_for_its_state_layout, batch_output

T0 = datetime(2026, 11, 22, 10, 0, 0, tzinfo=timezone.utc)
CITY = (52.60, 13.10)  # default zone Z00, limit 50


def ping(eid, vehicle, sec, speed, pos=CITY):
    return {"event_id": eid, "vehicle_id": vehicle, "speed_kmh": speed, "lat": pos[0], "lon": round(pos[1] + sec * 1e-4, 6),
            "event_time": (T0 + timedelta(seconds=sec)).isoformat().replace("+00:00", "Z")}


def land(landing, name, events, sec):
    """A landing file whose modification time (the events' ingest time) is T0 + sec."""
    path = landing / f"{name}.jsonl"
    path.write_text("\n".join(e if isinstance(e, str) else json.dumps(e) for e in events) + "\n")
    stamp = (T0 + timedelta(seconds=sec)).timestamp()
    os.utime(path, (stamp, stamp))


def test_incident_open_across_a_restart_is_written_once_with_both_halves(spark, tmp_path):
    landing, out = tmp_path / "landing", tmp_path / "incidents"
    landing.mkdir()
    initial = tmp_path / "open-incidents.csv"
    pd.DataFrame([{"vehicle_id": "V9", "started_at": "2026-11-22 09:59:40", "ended_at": "2026-11-22 09:59:58",
                   "zone_id": "Z00", "max_speed_kmh": 95.0, "max_excess_kmh": 45.0, "distance_km": 0.4, "pings": 7,
                   "last_lat": CITY[0], "last_lon": CITY[1], "status": "open"}]).to_csv(initial, index=False)
    s = RunSettings(job="fleet", source=f"files://{landing}?max_files_per_trigger=1", trigger="available-now",
                    sinks={"incidents": f"parquet://{out}"},
                    state_dir=str(tmp_path / "state"), incident_initial_state=str(initial))
    # run 1: V1 above the limit from 0 s to 24 s (open, not closed); V9 goes on from the table
    land(landing, "a", [ping(f"a{i}", "V1", i * 4, 70.0) for i in range(4)] + [ping("a9", "V9", 2, 80.0)], 12)
    land(landing, "b", [ping(f"b{i}", "V1", 16 + i * 4, 75.0) for i in range(3)] + [
        ping("b9", "V9", 10, 85.0),
        {**ping("x1", "V5", 20, 150.0), "vehicle_id": ""},        # no vehicle: dead letter
        ping("x2", "V5", 20 + 7200, 150.0),                       # 2 h ahead of ingest: dead letter
        ping("x3", "V5", 20 + 7205, 150.0), "not json"], 26)
    first = Run(spark, plan_run(s)).start_and_wait()
    assert first.stopped_by == "end of input"
    assert not out.exists() or spark.read.parquet(str(out)).count() == 0  # nothing has closed yet

    # run 2, from the checkpoint: V1 back under the limit at 30 s, V9 silent for 30 s
    land(landing, "c", [ping("c1", "V1", 28, 71.0), ping("c2", "V1", 30, 40.0), ping("c3", "V2", 45, 20.0)], 46)
    land(landing, "d", [ping("d1", "V2", 80, 20.0)], 81)
    second = Run(spark, plan_run(s)).start_and_wait()
    assert second.stopped_by == "end of input"

    rows = {r.vehicle_id: r for r in spark.read.parquet(str(out)).collect()}
    assert sorted(rows) == ["V1", "V9"]  # each once; nothing from V5, whose pings are all dead letters
    v1 = rows["V1"]
    assert (v1.pings, v1.max_speed_kmh, v1.closed_by, v1.duration_s) == (8, 75.0, "speed", 28.0)
    assert v1.started_at == T0.replace(tzinfo=None) and v1.closed_at == (T0 + timedelta(seconds=30)).replace(tzinfo=None)
    v9 = rows["V9"]
    assert (v9.pings, v9.max_speed_kmh, v9.closed_by) == (9, 95.0, "timeout")
    assert v9.started_at == datetime(2026, 11, 22, 9, 59, 40) and v9.distance_km > 0.4


def test_stream_equals_the_static_run_for_every_incident_closed_under_the_watermark(spark, tmp_path):
    # two batches of 60 s of events each (state carried from one to the next), then the flush
    s = RunSettings(job="fleet", source="generator://?seed=5&start=2026-11-22T10:00:00Z&rate=100&vehicles=200&late=0"
                    "&rows_per_batch=6000", max_events=12_000, incident_timeout="10s",
                    sinks={"incidents": "memory:inc_stream"}, state_dir=str(tmp_path / "state"))
    summary = Run(spark, plan_run(s)).start_and_wait()
    watermark = summary.queries[0].watermark
    expected = batch_output(spark, s, "incidents").where(F.col("closed_at") <= F.lit(watermark).cast("timestamp"))
    got = spark.table("inc_stream")
    assert got.count() >= 3
    assertDataFrameEqual(got, expected, rtol=1e-9)


def test_state_of_the_per_vehicle_layout_is_refused_in_one_line(spark, tmp_path, monkeypatch):
    """A checkpoint whose incidents state is keyed by vehicle (as before groups) stops the run with
    one line that names the checkpoint and says how to start afresh, not Spark's schema error."""
    from speedlayer.pipelines.fleet import incidents

    s = RunSettings(job="fleet", source="generator://?seed=5&rate=100&vehicles=20&rows_per_batch=400", max_events=400,
                    sinks={"incidents": f"parquet://{tmp_path / 'out'}"}, state_dir=str(tmp_path / "state"))
    with monkeypatch.context() as m:  # the earlier layout: one key per vehicle (a string, not a group number)
        m.setattr(incidents, "incident_group", lambda vehicle: F.col(vehicle).alias("_group"))
        assert Run(spark, plan_run(s)).start_and_wait().queries[0].batches >= 1
    assert_refused_for_its_state_layout(spark, s.model_copy(update={"max_events": 800}), "incidents")
