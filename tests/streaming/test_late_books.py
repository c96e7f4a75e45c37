"""Late data, kept: the books of the fleet windows balance, and agree with Spark's own counter.

events in = accepted (counted in windows) + late (the ``late`` output) + malformed (dead letters)
+ duplicates removed; and the late events are exactly those Spark counts in
``numRowsDroppedByWatermark``. Both queries read the same files one per micro-batch, so they see
the same batches and the same watermarks.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from speedlayer.runtime.build import build_output
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.settings import RunSettings
from tests.helpers import land_files

T0 = datetime(2026, 11, 22, 10, 0, 0, tzinfo=timezone.utc)


def ev(eid, sec, vehicle="V1"):
    return json.dumps({"event_id": eid, "vehicle_id": vehicle, "speed_kmh": 30.0, "lat": 52.6, "lon": 13.1,
                       "event_time": (T0 + timedelta(seconds=sec)).isoformat().replace("+00:00", "Z")})


FILES = [
    [ev("a", 0), ev("b", 20), ev("b", 20)],                  # b re-sent: a duplicate removed
    [ev("c", 30), ev("d", 5, "V2"), ev("e", 40), "{oops"],   # d is 15 s behind the watermark yet counted (see DESIGN.md)
    [ev("f", 12), ev("f", 12), ev("g", 50), ev("h", 33)],    # f (twice) is behind the previous batch's watermark: late
    [ev("i", 60), ev("j", 44, "V2"), ev("k", 41)],           # j, k are behind 55 s but not behind 45 s: counted
    [ev("l", 30, "V3")],                                      # late
]


def test_events_in_equal_accepted_plus_late_plus_malformed_plus_duplicates(spark, tmp_path):
    landing = tmp_path / "landing"
    land_files(landing, FILES, T0 + timedelta(seconds=100))
    s = RunSettings(job="fleet", source=f"files://{landing}?max_files_per_trigger=1", trigger="available-now",
                    sinks={"windows": "memory:books_windows", "late": "memory:books_late"}, state_dir=str(tmp_path / "st"))
    plan = plan_run(s)
    progress = {}
    for name, mode in (("windows", "complete"), ("late", "append")):
        query = (build_output(spark, plan, name).writeStream.format("memory").queryName(f"books_{name}")
                 .outputMode(mode).option("checkpointLocation", str(tmp_path / "st" / name)).trigger(availableNow=True).start())
        query.awaitTermination()
        progress[name] = query.recentProgress

    operators = [op for p in progress["windows"] for op in p["stateOperators"]]
    dropped_by_spark = sum(op["numRowsDroppedByWatermark"] for op in operators)
    duplicates = sum(op["customMetrics"].get("numDroppedDuplicateRows", 0) for op in operators)
    accepted = spark.table("books_windows").agg({"events": "sum"}).first()[0]
    late = spark.table("books_late")
    late_events = late.agg({"copies": "sum"}).first()[0]
    malformed = build_output(spark, plan, "dead-letters", batch=True).count()
    events_in = sum(len(lines) for lines in FILES)

    assert sorted((r.event_id, r.copies) for r in late.collect()) == [("f", 2), ("l", 1)]
    assert (accepted, late_events, malformed, duplicates) == (10, 3, 1, 1)
    assert events_in == accepted + late_events + malformed + duplicates
    assert late_events == dropped_by_spark
    f = late.where("event_id = 'f'").first()
    assert (f.window_start, f.missed_watermark) == (datetime(2026, 11, 22, 10, 0, 10), datetime(2026, 11, 22, 10, 0, 15))
