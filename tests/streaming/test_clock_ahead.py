"""One event with a clock far ahead never silences the stream; one dated year 1 never crashes it.

The issue's scenario at small scale: landing files written live (each file's modification time, its
ingest time, just after its last event), read one per micro-batch with ``--trigger available-now``,
one valid-looking ping 50 minutes ahead in a middle file. The windows are checked against an oracle
written here in plain Python over the input events, not with the pipeline's functions.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from datetime import datetime, timedelta, timezone

from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings

T0 = datetime(2026, 11, 22, 10, 0, 0, tzinfo=timezone.utc)
VEHICLES = ("V1", "V2", "V3")
FILES, FILE_SECONDS = 8, 10
WINDOW_S, WATERMARK_S, LIMIT_KMH = 10, 5, 50  # the fleet job's defaults; (52.6, 13.1) lies in the 50 km/h city default


def ping(eid: str, vehicle: str, when: datetime, speed: float) -> dict:
    return {"event_id": eid, "vehicle_id": vehicle, "event_time": when.isoformat().replace("+00:00", "Z"),
            "speed_kmh": speed, "lat": 52.6, "lon": 13.1}


def on_time_pings() -> list[list[dict]]:
    """One ping a second per vehicle, FILE_SECONDS of them per file; speeds vary around the limit."""
    files = []
    for f in range(FILES):
        pings = []
        for s in range(f * FILE_SECONDS, (f + 1) * FILE_SECONDS):
            for v, vehicle in enumerate(VEHICLES):
                pings.append(ping(f"e{s}-{vehicle}", vehicle, T0 + timedelta(seconds=s), float(30 + (s * 7 + v * 11) % 41)))
        files.append(pings[::-1])  # newest first: some disorder inside a file
    return files


def ingest_time(file: int) -> datetime:
    """A live landing: each file is modified (its events' ingest time) just after its last event."""
    return T0 + timedelta(seconds=(file + 1) * FILE_SECONDS, milliseconds=500)


def land(landing, files: list[list[str]]) -> None:
    landing.mkdir(parents=True)
    for i, lines in enumerate(files):
        path = landing / f"f{i}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (ingest_time(i).timestamp(), ingest_time(i).timestamp()))


def expected_windows(pings: list[dict]) -> dict[tuple, tuple]:
    """The oracle: per (window start, vehicle), events, average, max and over-limit count, for every
    window the final watermark (newest event - WATERMARK_S) has closed."""
    times = {p["event_id"]: datetime.fromisoformat(p["event_time"].replace("Z", "+00:00")) for p in pings}
    watermark = max(times.values()) - timedelta(seconds=WATERMARK_S)
    groups: dict[tuple, list[float]] = defaultdict(list)
    for p in pings:
        t = times[p["event_id"]]
        start = T0 + timedelta(seconds=(t - T0).total_seconds() // WINDOW_S * WINDOW_S)
        if start + timedelta(seconds=WINDOW_S) <= watermark:
            groups[(start.replace(tzinfo=None), p["vehicle_id"])].append(p["speed_kmh"])
    return {k: (len(v), sum(v) / len(v), max(v), sum(s > LIMIT_KMH for s in v)) for k, v in groups.items()}


def test_an_event_50_minutes_ahead_is_a_dead_letter_and_every_window_is_written(spark, tmp_path):
    files = on_time_pings()
    ahead = json.dumps(ping("ahead", "V2", ingest_time(2) + timedelta(minutes=50), 44.0))
    lines = [[json.dumps(p) for p in pings] for pings in files]
    lines[2].insert(7, ahead)  # the third of eight files: windows before it are closed, those after it at risk
    land(tmp_path / "landing", lines)

    s = RunSettings(job="fleet", source=f"files://{tmp_path / 'landing'}?max_files_per_trigger=1",
                    trigger="available-now", state_dir=str(tmp_path / "state"),
                    sinks={"windows": "memory:ahead_windows", "dead-letters": "memory:ahead_dead"})
    Run(spark, plan_run(s)).start_and_wait()

    written = {(r.window_start, r.vehicle_id): (r.events, r.avg_speed_kmh, r.max_speed_kmh, r.over_limit_events)
               for r in spark.table("ahead_windows").collect()}
    expected = expected_windows([p for pings in files for p in pings])
    assert len(expected) == 21  # windows 10:00:00 .. 10:01:00 for three vehicles: closed by the 10:01:14 watermark
    assert sorted(written) == sorted(expected), "windows missing or extra"
    for key, (events, avg, top, over) in expected.items():
        got = written[key]
        assert (got[0], got[2], got[3]) == (events, top, over), key
        assert abs(got[1] - avg) < 1e-9, key
    assert [(r.payload, r.reason) for r in spark.table("ahead_dead").collect()] == [
        (ahead, "field 'event_time' is more than 1s ahead of ingest time")]


def test_events_dated_year_1_and_1980_are_dead_letters_and_the_late_query_goes_on(spark, tmp_path):
    # The late output hands rows to pandas (transformWithStateInPandas), which holds no time before 1677:
    # a year-1 event failed the Python worker, and every restart replayed the same batch.
    early = {"year 1": "0001-01-01T00:00:00Z", "GPS epoch": "1980-01-06T00:00:00Z"}
    files = [[json.dumps(ping("a", "V1", T0, 30.0))],
             [json.dumps(ping("b", "V1", T0 + timedelta(seconds=20), 30.0))]
             + [json.dumps({**ping(name, "V2", T0, 30.0), "event_time": when}) for name, when in early.items()],
             [json.dumps(ping("c", "V1", T0 + timedelta(seconds=30), 30.0))],
             [json.dumps(ping("d", "V1", T0 + timedelta(seconds=40), 30.0)),
              json.dumps(ping("late", "V3", T0 + timedelta(seconds=2), 30.0))]]
    land(tmp_path / "landing", files)
    s = RunSettings(job="fleet", source=f"files://{tmp_path / 'landing'}?max_files_per_trigger=1",
                    trigger="available-now", state_dir=str(tmp_path / "state"),
                    sinks={"late": "memory:year1_late", "dead-letters": "memory:year1_dead"})
    summary = Run(spark, plan_run(s)).start_and_wait()

    assert summary.stopped_by == "end of input"
    # Spark drops rows behind the previous batch's watermark: "late" (10:00:02) misses the 10:00:15 that b set
    assert [(r.event_id, r.window_start, r.missed_watermark) for r in spark.table("year1_late").collect()] == [
        ("late", datetime(2026, 11, 22, 10, 0, 0), datetime(2026, 11, 22, 10, 0, 15))]
    dead = sorted((json.loads(r.payload)["event_id"], r.reason) for r in spark.table("year1_dead").collect())
    assert dead == [("GPS epoch", "field 'event_time' is before 2000-01-01T00:00:00Z: a reset clock"),
                    ("year 1", "field 'event_time' is before 2000-01-01T00:00:00Z: a reset clock")]
