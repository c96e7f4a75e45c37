"""Fleet events for the outage tests, written in plain Python, and the alerts they must give (``tests.oracle``).

Events go one every 0.1 s of event time from ``T0``, 20 vehicles all over Berlin's zones, speeds
0–110 km/h, so about four in ten are above their zone's limit (an alert). Among them: malformed
lines (dead letters, no alert) and re-sent copies, a few lines later or across a file boundary,
which must give one alert, not two. Seeded: the same call gives the same lines.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone

from tests import oracle

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc)
#: the ingest time of file i is INGEST + i seconds (its modification time, see tests.helpers.land_files)
INGEST = T0 + timedelta(minutes=10)
BAD = ['{"event_id": "broken', '{"event_id": "x", "vehicle_id": "V1", "event_time": "2026-11-22T10:00:00Z", '
       '"speed_kmh": -5, "lat": 52.5, "lon": 13.4}', "[]"]


def ping(n: int, rng: random.Random) -> str:
    when = T0 + timedelta(milliseconds=100 * n)
    return json.dumps({"event_id": f"e{n:06d}", "vehicle_id": f"V{n % 20:02d}",
                       "event_time": when.isoformat().replace("+00:00", "Z"), "speed_kmh": round(rng.uniform(0, 110), 1),
                       "lat": round(rng.uniform(52.35, 52.56), 5), "lon": round(rng.uniform(13.2, 13.65), 5)})


def event_files(files: int, per_file: int, seed: int = 23) -> list[list[str]]:
    """``files`` lists of ``per_file`` events each (plus bad lines and re-sent copies)."""
    rng, out = random.Random(seed), []
    for f in range(files):
        lines = [out[-1][-1]] if out else []  # re-sent across the boundary: the previous file's last event
        for n in range(f * per_file, (f + 1) * per_file):
            lines.append(ping(n, rng))
            if n % 37 == 5:
                lines.append(BAD[n % len(BAD)])
            if n % 41 == 7 and len(lines) > 3:
                lines.append(lines[-3])  # re-sent a few events later
        out.append(lines)
    return out


def ingest_of(file_index: int) -> datetime:
    """The ingest time of a landed file, as the oracle takes it (naive UTC)."""
    return (INGEST + timedelta(seconds=file_index)).replace(tzinfo=None)


def expected_alerts(files: list[list[str]]) -> dict[str, float]:
    """event_id -> excess km/h of every alert the files must give, from their lines alone (no Spark)."""
    pings = [oracle.parse(line, ingest_of(i)) for i, lines in enumerate(files) for line in lines]
    return oracle.alerts(oracle.first_copies([p for p in pings if p is not None]))
