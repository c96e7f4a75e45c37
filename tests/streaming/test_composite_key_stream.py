"""Readings with no id field, identified by a device and its time: a composite dedup key on a stream.

The same job twice, as a user's Python ``Job`` and as a job file, each with ``dedup_key`` the pair
(device_id, reading_time). Some readings are re-sent: byte for byte in the same file and in a
later one, or corrected (another value) in the same file; two devices read at the same instants;
some readings arrive behind the watermark. The oracle below is written from the documented rules
in plain Python over the input lines, not from the pipeline: in micro-batch k (file k) a reading
is late when its time is at or before the newest time of files 0..k-2 minus the watermark; of the
copies of a (device, time) that are not late, the first one of the first file that has one counts
(file order is offset order), and later ones are dropped; the late ones of one file share a row
per (device, time), the first copy's, with their count and the 10 s window they fell in.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from speedlayer import (
    APPEND,
    DEAD_LETTERS,
    LATE,
    EventSchema,
    Field,
    Job,
    LazyOutputs,
    Output,
    drop_duplicates,
    late_events,
    with_watermark,
)
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from tests.e2e.killing import query_state
from tests.helpers import land_files, run_recording

T0 = datetime(2026, 11, 22, 10, 0, 0)  # naive UTC, as Spark hands timestamps to Python here
INGEST = T0 + timedelta(minutes=5)
WATERMARK, WINDOW = timedelta(seconds=5), timedelta(seconds=10)
KEY = ("device_id", "reading_time")

READING = EventSchema("reading", (Field("device_id", "string"), Field("reading_time", "timestamp"),
                                  Field("value", "double")), time_field="reading_time")


def readings_pipeline(events, params):
    watermarked = with_watermark(events, params, READING.time_field)
    return LazyOutputs({
        "readings": lambda: drop_duplicates(watermarked, params, READINGS.dedup_key).select(*KEY, "value"),
        "late": lambda: late_events(watermarked, READINGS, params),
    })


READINGS = Job(name="readings", summary="sensor readings without an id", schema=READING, pipeline=readings_pipeline,
               dedup_key=KEY, outputs={"readings": Output("readings", "each reading once", (APPEND,), APPEND, True, KEY),
                                       "dead-letters": DEAD_LETTERS, "late": LATE})

READINGS_YAML = """\
name: readings
schema:
  time_field: reading_time
  fields:
    - {name: device_id, type: string}
    - {name: reading_time, type: timestamp}
    - {name: value, type: double}
dedup_key: [device_id, reading_time]   # no id: a device and its time identify a reading
outputs:
  readings:
    sql: SELECT device_id, reading_time, value FROM events
    key: [device_id, reading_time]
"""


def reading(device: str, ms: int, value: float) -> str:
    when = T0 + timedelta(milliseconds=ms)
    return json.dumps({"device_id": device, "reading_time": when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                       "value": value})


def input_files(n: int = 4) -> list[list[str]]:
    """File k: three devices reading at the same instants of its 8 s, re-sends and (from file 2) late readings."""
    files = []
    for k in range(n):
        base = k * 8_000
        lines = [reading(d, base + s * 2_000 + 250 * i, 20.0 + k + s + i / 10)
                 for s in range(4) for i, d in enumerate(("D1", "D2", "D3"))]
        lines.insert(5, lines[0])                                  # a byte-identical copy, another line
        lines.insert(2, reading("D2", base + 2_250, 99.0))         # a corrected copy before D2's own line
        if k:
            lines.append(files[k - 1][4])                          # a copy of the previous file's: not late
        if k >= 2:  # behind the late bound, (k-2)*8 s + 6.5 s - 5 s
            behind = (k - 2) * 8_000
            lines += [reading("D1", behind + 1_001, 1.0), reading("D2", behind + 1_001, 2.0),  # one instant, two devices
                      reading("D2", behind + 1_001, 3.0),          # a late copy that differs
                      reading("D3", behind + 1_500, 4.0),          # exactly at the bound: late
                      reading("D3", behind + 1_501, 5.0),          # just after it: counted
                      files[k - 2][0]]                             # a late copy of a counted reading
        files.append(lines)
    return files


def oracle(files: list[list[str]], per_batch: int = 1) -> tuple[dict, list[tuple]]:
    """The readings kept, (device, time) -> value, and the late rows
    (device, time, value, window_start, window_end, missed_watermark, copies), sorted; ``per_batch`` files
    make a micro-batch."""
    newest: list[datetime] = []
    kept: dict[tuple[str, datetime], float] = {}
    late_rows = []
    batches = [sum(files[i:i + per_batch], []) for i in range(0, len(files), per_batch)]
    for k, lines in enumerate(batches):
        before = newest[:max(k - 1, 0)]
        bound = max(before) - WATERMARK if before else None
        events = [json.loads(line) for line in lines]
        late: dict[tuple[str, datetime], tuple[float, int]] = {}
        for event in events:
            when = datetime.strptime(event["reading_time"], "%Y-%m-%dT%H:%M:%S.%fZ")
            key = (event["device_id"], when)
            if bound is not None and when <= bound:
                value, copies = late.get(key, (event["value"], 0))
                late[key] = (value, copies + 1)
            else:
                kept.setdefault(key, event["value"])
        for (device, when), (value, copies) in late.items():
            start = T0.replace(second=0) + (when - T0.replace(second=0)) // WINDOW * WINDOW
            late_rows.append((device, when, value, start, start + WINDOW, bound, copies))
        newest.append(max(datetime.strptime(e["reading_time"], "%Y-%m-%dT%H:%M:%S.%fZ") for e in events))
    return kept, sorted(late_rows)


@pytest.fixture(scope="module")
def landed(tmp_path_factory):
    root = tmp_path_factory.mktemp("readings")
    files = input_files()
    land_files(root / "landing", files, INGEST)
    (root / "readings.yaml").write_text(READINGS_YAML)
    return root, files


@pytest.mark.parametrize(("form", "per_batch"), [("python", 1), ("job file", 1), ("python", 2)])
def test_one_copy_per_device_and_time_and_the_late_ones_keyed_by_both(spark, landed, tmp_path, form, per_batch):
    """Also: how the source cuts batches decides which readings are late (docs/sources.md): two files a
    batch leave the watermark too far behind for any of them."""
    root, files = landed
    table = f"{form.replace(' ', '_')}_{per_batch}"
    job = {"job": "readings"} if form == "python" else {"job_file": str(root / "readings.yaml")}
    settings = RunSettings(**job, source=f"files://{root / 'landing'}?max_files_per_trigger={per_batch}",
                           trigger="available-now", watermark="5s", state_dir=str(tmp_path / "state"),
                           sinks={"readings": f"memory:kept_{table}", "late": f"memory:late_{table}"})
    plan = plan_run(settings, job=READINGS if form == "python" else None)
    assert plan.job.outputs["late"].key == (*KEY, "missed_watermark")
    assert Run(spark, plan).start_and_wait().stopped_by == "end of input"

    kept, late = oracle(files, per_batch)
    rows = [(r.device_id, r.reading_time, r.value) for r in spark.table(f"kept_{table}").collect()]
    assert len(rows) == len({(d, t) for d, t, _ in rows})  # one copy per (device, time)
    assert {(d, t): v for d, t, v in rows} == kept
    assert kept[("D2", T0 + timedelta(milliseconds=2_250))] == 99.0  # the corrected copy came first
    got = sorted(tuple(r) for r in spark.table(f"late_{table}").collect())
    assert got == late
    if per_batch == 2:  # the same readings, cut in two batches: none late
        assert late == [] and len(kept) > 12 * 4 + 2
        return
    # per late file: D1 and D2 at one instant, D2 twice (its first copy shown), D3 at the bound, a re-send
    assert len(late) == 4 * 2 and {r[6] for r in late if r[0] == "D2"} == {2} and len(kept) == 12 * 4 + 2


# Batch 1 (files 2 and 3, each read by its own task) holds two differing copies of one reading; Spark
# packs the larger file first, so the lowest-offset copy (f2.jsonl) sits in the smaller file.
REPLAYED = [
    [reading("D1", 0, 10.0), reading("D2", 0, 11.0)], [reading("D1", 1_000, 12.0)],
    [reading("D1", 4_000, 13.0)], [reading("D2", 4_000, 14.0), reading("D1", 4_000, 15.0), reading("D1", 3_000, 16.0)],
]


def test_a_replayed_batch_keeps_the_same_copies(spark, tmp_path):
    landing = tmp_path / "landing"
    land_files(landing, REPLAYED, INGEST)
    settings = RunSettings(job="readings", source=f"files://{landing}?max_files_per_trigger=2", dedup="exact",
                           sinks={"readings": "memory:replayed"}, state_dir=str(tmp_path / "st"))
    plan = plan_run(settings, job=READINGS)
    checkpoint, seen = tmp_path / "st" / "readings", {}

    for attempt in (1, 2):
        run_recording(spark, plan, "readings", checkpoint, seen, attempt, fail_batch=1)
        assert (query_state(checkpoint).committed, query_state(checkpoint).in_flight) == (0, 1)
    run_recording(spark, plan, "readings", checkpoint, seen, 3, fail_batch=None)
    assert seen[(1, 1)] == seen[(2, 1)] == seen[(3, 1)]
    # the oracle: per (device, time) in files 2 and 3, the copy with the lowest (file, line)
    expected = {}
    for i in (2, 3):
        for line in REPLAYED[i]:
            event = json.loads(line)
            expected.setdefault((event["device_id"], event["reading_time"]), event["value"])
    got = {(d, t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"): v for d, t, v in seen[(3, 1)]}
    assert got == expected and expected[("D1", "2026-11-22T10:00:04.000Z")] == 13.0
