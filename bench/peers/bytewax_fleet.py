"""The fleet window job on Bytewax (runs in its own virtual environment, see docs/benchmarks.md).

    .peers-venv/bytewax/bin/python bench/peers/bytewax_fleet.py DATASET_DIR OUT.jsonl [--workers 2]

One source partition reads the dataset's files in order (an event-time job must see them in
order; several partitions reading files side by side would push the watermark past the slower
files' events), keyed by vehicle, ``fold_window`` over 10 s tumbling windows with an event
clock that waits 5 s (the watermark) and, since this is a replay, a clock whose system time
stands still. Windows are collected in memory and written at the end.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timedelta, timezone
from itertools import islice
from pathlib import Path

import bytewax.operators as op
import orjson
from bytewax.dataflow import Dataflow
from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from bytewax.operators.windowing import EventClock, TumblingWindower, fold_window
from bytewax.testing import TestingSink, cluster_main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    WATERMARK_MS,
    WINDOW_MS,
    input_files,
    load_zones,
    parse_time_ms,
    read_lines,
    speed_limit,
    window_start,
    write_windows,
)

ZONES = load_zones()
BATCH = 2_000
REPLAY_NOW = datetime(2020, 1, 1, tzinfo=timezone.utc)


class _Lines(StatefulSourcePartition):
    def __init__(self, files: list[Path]):
        self._lines = read_lines(files, "rb")

    def next_batch(self):
        batch = list(islice(self._lines, BATCH))
        if not batch:
            raise StopIteration()
        return batch

    def snapshot(self):
        return None


class OrderedFiles(FixedPartitionedSource):
    def __init__(self, directory: Path):
        self.files = input_files(directory)

    def list_parts(self):
        return ["all"]

    def build_part(self, step_id, for_part, resume_state):
        return _Lines(self.files)


def parse(line: bytes) -> dict:
    e = orjson.loads(line)
    e["t"] = parse_time_ms(e["event_time"])
    return e


def fold(acc, e):
    speed = float(e["speed_kmh"])
    limit = speed_limit(ZONES, float(e["lat"]), float(e["lon"]))
    if acc is None:
        return [window_start(e["t"]), 1, speed, speed, int(limit is not None and speed > limit)]
    acc[1] += 1
    acc[2] += speed
    acc[3] = max(acc[3], speed)
    acc[4] += int(limit is not None and speed > limit)
    return acc


def merge(a, b):
    if a is None or b is None:
        return a or b
    return [a[0], a[1] + b[1], a[2] + b[2], max(a[3], b[3]), a[4] + b[4]]


def build(directory: Path, collected: list) -> Dataflow:
    flow = Dataflow("fleet_windows")
    events = op.map("parse", op.input("files", flow, OrderedFiles(directory)), parse)
    keyed = op.key_on("vehicle", events, lambda e: e["vehicle_id"])
    # A replay: system time must not move the watermark (Bytewax's default clock adds the system time
    # elapsed since the newest event), so "now" stands still and only event time and EOF close windows.
    clock = EventClock(lambda e: datetime.fromtimestamp(e["t"] / 1000, timezone.utc),
                       wait_for_system_duration=timedelta(milliseconds=WATERMARK_MS),
                       now_getter=lambda: REPLAY_NOW, to_system_utc=lambda ts: None)
    windower = TumblingWindower(length=timedelta(milliseconds=WINDOW_MS), align_to=datetime(2020, 1, 1, tzinfo=timezone.utc))
    windows = fold_window("windows", keyed, clock, windower, lambda: None, fold, merge)
    rows = op.map("row", windows.down, lambda kv: {
        "window_start": kv[1][1][0], "vehicle_id": kv[0], "events": kv[1][1][1],
        "avg_speed_kmh": kv[1][1][2] / kv[1][1][1], "max_speed_kmh": kv[1][1][3], "over_limit_events": kv[1][1][4]})
    op.output("out", rows, TestingSink(collected))
    return flow


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dataset", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--workers", type=int, default=2, help="worker threads in this process (default 2)")
    args = p.parse_args()
    collected: list = []
    cluster_main(build(args.dataset, collected), addresses=None, proc_id=0, worker_count_per_proc=args.workers)
    print(write_windows(collected, args.out), "windows")


if __name__ == "__main__":
    main()
