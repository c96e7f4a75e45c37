"""What every peer of the fleet window job shares: the zones table, the window maths, the output format.

The job: 10 s tumbling windows per vehicle over event time, 5 s watermark, per window the event
count, average and maximum speed, and the count of events above their zone's speed limit (the
first zone rectangle of ``speedlayer/data/zones.csv`` that holds the position, bounds inclusive).
Each peer writes its windows as JSON lines ``{"window_start": epoch ms, "vehicle_id", "events",
"avg_speed_kmh", "max_speed_kmh", "over_limit_events"}`` so the driver can compare them. This
module uses the standard library only: the peers run in their own virtual environments.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

WINDOW_MS = 10_000
WATERMARK_MS = 5_000
ZONES_CSV = Path(__file__).resolve().parents[2] / "src" / "speedlayer" / "data" / "zones.csv"


def zone_rows(path: Path = ZONES_CSV) -> list[dict[str, str]]:
    """The zones table's rows as text, in file order (first match wins)."""
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def load_zones(path: Path = ZONES_CSV) -> list[tuple[float, float, float, float, float]]:
    """(min_lat, max_lat, min_lon, max_lon, limit) per zone, in file order (first match wins)."""
    return [(float(r["min_lat"]), float(r["max_lat"]), float(r["min_lon"]), float(r["max_lon"]),
             float(r["speed_limit_kmh"])) for r in zone_rows(path)]


def limit_case() -> str:
    """The zone limit as Flink SQL over ``lat``/``lon``: the first zone that holds the position (bounds inclusive)."""
    return zone_case("speed_limit_kmh")


def zone_case(field: str, lat: str = "lat", lon: str = "lon", path: Path = ZONES_CSV) -> str:
    """One field of the first zone holding ``lat``/``lon`` as Flink SQL: ``zone_id``, ``name`` or ``speed_limit_kmh``."""
    def value(r: dict[str, str]) -> str:
        return f"CAST({float(r[field])!r} AS DOUBLE)" if field == "speed_limit_kmh" else "'" + r[field].replace("'", "''") + "'"
    whens = " ".join(f"WHEN {lat} BETWEEN {float(r['min_lat'])!r} AND {float(r['max_lat'])!r} "
                     f"AND {lon} BETWEEN {float(r['min_lon'])!r} AND {float(r['max_lon'])!r} THEN {value(r)}"
                     for r in zone_rows(path))
    return f"CASE {whens} END"


def speed_limit(zones, lat: float, lon: float) -> float | None:
    for min_lat, max_lat, min_lon, max_lon, limit in zones:
        if min_lat <= lat <= max_lat and min_lon <= lon <= max_lon:
            return limit
    return None


def parse_time_ms(text: str) -> int:
    """Epoch ms of the wire format's ISO-8601 UTC time ('2026-01-01T00:00:03.250Z')."""
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def window_start(ms: int) -> int:
    return ms - ms % WINDOW_MS


def write_windows(rows, path: Path) -> int:
    """Write windows as JSON lines; rows are dicts with the keys named in the module docstring."""
    n = 0
    with open(path, "w") as handle:
        for r in rows:
            handle.write(json.dumps(r) + "\n")
            n += 1
    return n


def input_files(directory: Path) -> list[Path]:
    """The dataset's JSON-lines files in name order (the producer names them by first event)."""
    return sorted(p for p in Path(directory).iterdir() if p.suffix == ".jsonl" and not p.name.startswith("."))


def read_lines(files: list[Path], mode: str = "r") -> Iterator:
    """The files' lines, file after file, each file closed once read through (``mode="rb"`` for bytes)."""
    for path in files:
        with open(path, mode) as handle:
            yield from handle
