"""Small hand-made events for the testing helpers' own tests."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

T0 = datetime(2026, 11, 22, 10, 0, 0, tzinfo=timezone.utc)
#: the landing files' modification time: after every event below
INGEST = T0 + timedelta(minutes=5)
CITY = (52.60, 13.10)  # zone Z00, limit 50 km/h


def ping(eid: str, sec: float, speed: float = 30.0, vehicle: str = "V1") -> dict:
    """A fleet vehicle ping ``sec`` seconds after T0."""
    return {"event_id": eid, "vehicle_id": vehicle, "speed_kmh": speed, "lat": CITY[0], "lon": CITY[1],
            "event_time": (T0 + timedelta(seconds=sec)).isoformat().replace("+00:00", "Z")}


def at(sec: float) -> datetime:
    """T0 + ``sec`` as the naive datetime ``collect()`` gives (the sessions run in UTC)."""
    return (T0 + timedelta(seconds=sec)).replace(tzinfo=None)


def fleet_pings() -> list[dict]:
    """Three vehicles pinging every 2 s for a minute, speeds rising, and two of the pings sent twice."""
    pings = [ping(f"e{v}-{s}", s, 20.0 + s + 3 * v, f"V{v}") for v in range(3) for s in range(0, 60, 2)]
    return pings + [pings[5], pings[17]]
