"""Allowed lateness on a stream: revision 0 when the watermark closes a window, corrections within the
lateness, later events to the ``late`` output, and the books still balance.

Files land one per micro-batch (window 10 s, watermark 5 s, lateness 20 s). The real watermark of
batch k is the newest event time of the batches before it minus 5 s: 0 (none yet), 3, 16, 25, 31,
45, 45, then 195 in the final batch without data. An event is late when it is at or before the
previous batch's watermark minus the lateness.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from speedlayer.runtime.build import build_output
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.settings import RunSettings
from tests.helpers import land_files

T0 = datetime(2026, 11, 22, 10, 0, 0, tzinfo=timezone.utc)


def ev(eid, sec, vehicle="V1", speed=30.0):
    return json.dumps({"event_id": eid, "vehicle_id": vehicle, "speed_kmh": speed, "lat": 52.6, "lon": 13.1,  # limit 50
                       "event_time": (T0 + timedelta(seconds=sec)).isoformat().replace("+00:00", "Z")})


FILES = [
    [ev("a", 1), ev("b", 8, speed=50.0), ev("b", 8, speed=50.0)],   # b re-sent
    [ev("c", 21), "{oops"],
    [ev("d", 30)],                                                   # watermark 16 s: [0 s, 10 s) of V1 closes, revision 0
    [ev("e", 4, speed=80.0), ev("f", 12, "V2", speed=40.0), ev("h", 36)],  # e: 21 s behind, within the lateness: revision 1
    [ev("g", 2), ev("i", 7), ev("j", 50)],                          # g at or before 25 - 20 s: late; i corrects again
    [ev("k", 9, "V3"), ev("l", 29, speed=60.0)],                    # k late (31 - 20 s); l corrects [20 s, 30 s)
    [ev("z", 200, "V9")],                                            # moves the watermark past every other window
]


def at(sec):
    return datetime(2026, 11, 22, 10, 0, 0) + timedelta(seconds=sec)


def test_late_events_within_the_lateness_correct_closed_windows_and_the_books_balance(spark, tmp_path):
    landing = tmp_path / "landing"
    land_files(landing, FILES, T0 + timedelta(seconds=300))
    s = RunSettings(job="fleet", source=f"files://{landing}?max_files_per_trigger=1", trigger="available-now",
                    allowed_lateness="20s", sinks={"windows": "memory:corr_windows", "late": "memory:corr_late"},
                    output_mode={"windows": "append"}, state_dir=str(tmp_path / "st"))  # append: every revision kept
    plan = plan_run(s)
    windows_plan = plan.queries[0]
    assert windows_plan.output.key_in(windows_plan.mode)[-1] == "revision"
    progress = {}
    for q in plan.queries:
        query = (build_output(spark, plan, q.output.name).writeStream.format("memory").queryName(f"corr_{q.output.name}")
                 .outputMode(q.mode).option("checkpointLocation", str(q.checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination()
        progress[q.output.name] = query.recentProgress

    windows = sorted((r.window_start, r.vehicle_id, r.revision, r.events, round(r.avg_speed_kmh, 3), r.max_speed_kmh,
                      r.over_limit_events) for r in spark.table("corr_windows").collect())
    assert windows == [
        (at(0), "V1", 0, 2, 40.0, 50.0, 0),          # closed at watermark 16 s
        (at(0), "V1", 1, 3, 53.333, 80.0, 1),        # + e (4 s) at watermark 25 s
        (at(0), "V1", 2, 4, 47.5, 80.0, 1),          # + i (7 s) at watermark 31 s; then past 10 + 20 s: dropped
        (at(10), "V2", 0, 1, 40.0, 40.0, 0),         # first seen after it closed: revision 0 at once
        (at(20), "V1", 0, 1, 30.0, 30.0, 0),
        (at(20), "V1", 1, 2, 45.0, 60.0, 1),         # + l (29 s) at watermark 45 s
        (at(30), "V1", 0, 2, 30.0, 30.0, 0),
        (at(50), "V1", 0, 1, 30.0, 30.0, 0),         # closed by the final batch (watermark 195 s)
    ]
    late = spark.table("corr_late")
    assert sorted((r.event_id, r.missed_watermark) for r in late.collect()) == [("g", at(25)), ("k", at(31))]

    # the books: the last revision of each window, plus the one window still open (z)
    last = {}
    for start, vehicle, _revision, events, *_ in windows:
        last[(start, vehicle)] = events
    accepted = sum(last.values()) + 1
    operators = [op for p in progress["windows"] for op in p["stateOperators"]]
    dropped_by_spark = sum(op["numRowsDroppedByWatermark"] for op in operators)
    duplicates = sum(op["customMetrics"].get("numDroppedDuplicateRows", 0) for op in operators)
    late_events = late.agg({"copies": "sum"}).first()[0]
    malformed = build_output(spark, plan, "dead-letters", batch=True).count()
    events_in = sum(len(lines) for lines in FILES)
    assert (accepted, late_events, malformed, duplicates) == (11, 2, 1, 1)
    assert events_in == accepted + late_events + malformed + duplicates
    assert late_events == dropped_by_spark

    # the late query reports what it wrote, for speedlayer_late_events_kept_total
    observed = [json.loads(p.json).get("observedMetrics", {}).get("speedlayer_late", {}) for p in progress["late"]]
    assert sum(o.get("rows", 0) for o in observed) == 2
