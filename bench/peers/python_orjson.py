"""The fleet window job as a single-threaded plain-Python loop with orjson: the floor any engine must beat.

    python bench/peers/python_orjson.py DATASET_DIR OUT.jsonl

Streams the files line by line, drops re-sent events by ``event_id`` (a set: the dataset fits in
memory), keeps one accumulator per (window, vehicle), and emits a window once the watermark
(newest event time minus 5 s) has passed its end, the rest at the end of the input, like an
engine does when a bounded stream ends.
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    WATERMARK_MS,
    WINDOW_MS,
    input_files,
    load_zones,
    parse_time_ms,
    speed_limit,
    window_start,
    write_windows,
)


def run(dataset: Path, out: Path) -> int:
    zones = load_zones()
    seen: set[str] = set()
    open_windows: dict[tuple[int, str], list] = {}
    done: list[dict] = []
    newest = -(2**62)
    late = 0
    for path in input_files(dataset):
        with open(path, "rb") as handle:
            for line in handle:
                e = orjson.loads(line)
                if e["event_id"] in seen:
                    continue
                seen.add(e["event_id"])
                t = parse_time_ms(e["event_time"])
                if t < newest - WATERMARK_MS - WINDOW_MS:  # its window has been emitted already
                    late += 1
                    continue
                newest = max(newest, t)
                speed = float(e["speed_kmh"])
                limit = speed_limit(zones, float(e["lat"]), float(e["lon"]))
                key = (window_start(t), e["vehicle_id"])
                acc = open_windows.get(key)
                if acc is None:
                    acc = open_windows[key] = [0, 0.0, speed, 0]
                acc[0] += 1
                acc[1] += speed
                acc[2] = max(acc[2], speed)
                acc[3] += int(limit is not None and speed > limit)
        watermark = newest - WATERMARK_MS
        for key in [k for k in open_windows if k[0] + WINDOW_MS <= watermark]:
            done.append(_row(key, open_windows.pop(key)))
    done.extend(_row(k, a) for k, a in open_windows.items())
    return write_windows(done, out)


def _row(key, acc) -> dict:
    return {"window_start": key[0], "vehicle_id": key[1], "events": acc[0], "avg_speed_kmh": acc[1] / acc[0],
            "max_speed_kmh": acc[2], "over_limit_events": acc[3]}


if __name__ == "__main__":
    print(run(Path(sys.argv[1]), Path(sys.argv[2])), "windows")
