"""files:// — a landing directory of JSON lines; bad lines become dead letters, nothing is lost."""

import json

from speedlayer.config import RunSettings
from speedlayer.runner import Run, plan_run


def line(eid, vid, t, speed):
    return json.dumps({"event_id": eid, "vehicle_id": vid, "event_time": t, "speed_kmh": speed, "lat": 52.6, "lon": 13.1})


def test_landing_files_feed_the_fleet_job(spark, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "part-1.json").write_text("\n".join([
        line("a", "V1", "2026-11-01T10:00:01Z", 40.0),
        line("b", "V1", "2026-11-01T10:00:02Z", 60.0),
        "{not json",
        "",
    ]) + "\n")
    (landing / "part-2.json").write_text("\n".join([
        line("c", "V2", "2026-11-01T10:00:03Z", 30.0),
        line("b", "V1", "2026-11-01T10:00:02Z", 60.0),  # re-sent
        line("d", "V2", "2026-11-01T10:00:04Z", -5),
    ]) + "\n")
    s = RunSettings(job="fleet", source=f"files://{landing}?max_files_per_trigger=1", trigger="available-now",
                    state_dir=str(tmp_path / "st"), output_mode={"windows": "complete"},
                    sinks={"windows": "memory:files_windows", "alerts": "memory:files_alerts", "dead-letters": "memory:files_dead"})
    summary = Run(spark, plan_run(s)).start_and_wait()
    assert summary.stopped_by == "end of input"
    windows = sorted((r.vehicle_id, r.events, r.max_speed_kmh) for r in spark.table("files_windows").collect())
    assert windows == [("V1", 2, 60.0), ("V2", 1, 30.0)]
    assert [r.event_id for r in spark.table("files_alerts").collect()] == ["b"]
    reasons = sorted(r.reason for r in spark.table("files_dead").collect())
    assert reasons == ["field 'speed_kmh' is outside [0, 400]", "malformed JSON: not a JSON object"]
    dead = spark.table("files_dead").collect()
    assert all(r.offset.endswith(".json") and r.ingest_time is not None for r in dead)
