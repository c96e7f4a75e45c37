"""A replayed micro-batch computes the same rows as its first attempt, re-sent copies included.

Idempotent-by-key sinks only give exactly once if a replay writes the same rows: a PostgreSQL
table that kept the first attempt's row of a key would then agree with a Parquet file written by
the replay. Batch 1 is written and then fails twice before it commits (the checkpoint shows it
planned and not committed); the third attempt commits. Batch 1 holds two copies of one
``event_id`` that differ (a producer that re-sent a corrected reading), in two files.

With ``--dedup exact`` the copy that counts is the one with the lowest offset (``<file>:<line>``),
whichever file Spark reads first: the oracle below finds it in the input lines with plain Python.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from speedlayer.runtime.build import build_output
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.settings import RunSettings
from tests.e2e.killing import query_state
from tests.helpers import land_files, run_recording

T0 = datetime(2026, 11, 22, 10, 0, 0, tzinfo=timezone.utc)
CITY = (52.60, 13.10)  # zone Z00, limit 50


def ping(eid: str, sec: int, speed: float, vehicle: str = "V1") -> str:
    return json.dumps({"event_id": eid, "vehicle_id": vehicle, "speed_kmh": speed, "lat": CITY[0], "lon": CITY[1],
                       "event_time": (T0 + timedelta(seconds=sec)).isoformat().replace("+00:00", "Z")})


# two files per micro-batch, each read by its own task; Spark packs the larger file (f3) first
FILES = [
    [ping("a", 0, 60.0), ping("b", 1, 70.0)], [ping("c", 2, 80.0, "V2")],
    [ping("d", 3, 61.0), ping("x", 4, 90.0)], [ping("x", 4, 95.0), ping("a", 0, 99.0), ping("e", 5, 62.0, "V2")],
]


def lowest_offset_speeds(files: list[list[str]], batch: range) -> dict[str, float]:
    """The oracle: per event_id in the files of ``batch``, the speed of its copy with the lowest
    (file number, line number), i.e. offset ``.../f<i>.jsonl:<line>`` in numeric order."""
    copies = {}
    for i in batch:
        for line_no, line in enumerate(files[i], start=1):
            event = json.loads(line)
            copies.setdefault(event["event_id"], []).append(((i, line_no), event["speed_kmh"]))
    return {eid: min(found)[1] for eid, found in copies.items()}


def settings(tmp_path, landing, table: str, dedup: str = "exact") -> RunSettings:
    return RunSettings(job="fleet", source=f"files://{landing}?max_files_per_trigger=2", dedup=dedup,
                       sinks={"alerts": f"memory:{table}"}, state_dir=str(tmp_path / "st"))


def test_a_replayed_batch_writes_the_same_rows_as_its_first_attempts(spark, tmp_path):
    landing = tmp_path / "landing"
    land_files(landing, FILES, T0 + timedelta(seconds=100))
    plan = plan_run(settings(tmp_path, landing, "replayed_alerts"))
    checkpoint, seen = tmp_path / "st" / "alerts", {}
    for attempt in (1, 2):  # batch 1 written and failed twice
        run_recording(spark, plan, "alerts", checkpoint, seen, attempt=attempt, fail_batch=1)
        crashed = query_state(checkpoint)
        assert (crashed.committed, crashed.in_flight) == (0, 1)  # written, never committed
    run_recording(spark, plan, "alerts", checkpoint, seen, attempt=3, fail_batch=None)
    assert query_state(checkpoint).committed >= 1

    assert seen[(1, 1)] == seen[(2, 1)] == seen[(3, 1)]
    # one alert per event_id, its lowest-offset copy; a copy of an event that an earlier batch took
    # (a) counts no more
    speeds = {r[0]: r[3] for r in seen[(3, 1)]}
    expected = lowest_offset_speeds(FILES, range(2, 4))
    assert speeds == {eid: expected[eid] for eid in ("d", "x", "e")} and speeds["x"] == 90.0
    assert sorted(r[0] for r in seen[(1, 0)]) == ["a", "b", "c"]


# One micro-batch, two files: the same two copies of x, the lower offset (f0) in the smaller or the
# larger file. Spark's dedup alone keeps the copy of the file it packs first (the larger); exact keeps f0's.
LAYOUTS = {
    "lowest in the smaller file": [[ping("x", 4, 90.0)], [ping("x", 4, 95.0), ping("d", 3, 61.0), ping("e", 5, 62.0)]],
    "lowest in the larger file": [[ping("d", 3, 61.0), ping("e", 5, 62.0), ping("x", 4, 90.0)], [ping("x", 4, 95.0)]],
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_lowest_offset_copy_counts_whichever_file_is_read_first(spark, tmp_path, layout):
    files = LAYOUTS[layout]
    land_files(tmp_path / "landing", files, T0 + timedelta(seconds=100))
    plan = plan_run(settings(tmp_path, tmp_path / "landing", "layout_alerts"))
    seen: dict = {}
    run_recording(spark, plan, "alerts", tmp_path / "st" / "alerts", seen, attempt=1, fail_batch=None)
    expected = lowest_offset_speeds(files, range(2))
    assert {r[0]: r[3] for r in seen[(1, 0)]} == expected and expected["x"] == 90.0
    # the batch recomputation keeps the same copy
    batch = build_output(spark, plan, "alerts", batch=True).collect()
    assert {r.event_id: r.speed_kmh for r in batch} == expected
