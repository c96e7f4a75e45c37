"""The fleet job's results computed the plain way, in Python over the raw events: the oracle of crash tests.

Written from the job's documented rules (README, docs), not from its code: no Spark, no pipeline
function, no decode. An event is valid when it is a JSON object whose ``event_id`` and
``vehicle_id`` are non-blank text, whose ``event_time`` is ISO-8601 text or epoch milliseconds
not far ahead of its ingest time, and whose speed, latitude and longitude are numbers within
[0, 400], [-90, 90] and [-180, 180]. Re-sent events count once. Zones: the first row of the zones
table whose bounds (inclusive) contain the position.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from importlib import resources

#: how far ahead of ingest an event time may be: any allowance between seconds and a day gives the
#: same verdicts on the generator's data (its far-ahead corruption is two days ahead)
AHEAD = timedelta(hours=1)
EPOCH = datetime(1970, 1, 1)


@dataclass(frozen=True)
class Ping:
    event_id: str
    vehicle_id: str
    event_time: datetime  # naive UTC
    speed_kmh: float
    lat: float
    lon: float


def _number(value) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _time(value) -> datetime | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return EPOCH + timedelta(milliseconds=value)
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(timezone.utc).replace(tzinfo=None)
    return parsed


def parse(payload: str | None, ingest: datetime) -> Ping | None:
    """The valid ping in ``payload``, or None when the job must refuse it (a dead letter)."""
    try:
        obj = json.loads(payload) if payload is not None else None
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    ids = [obj.get(k) for k in ("event_id", "vehicle_id")]
    if not all(isinstance(v, str) and v.strip() for v in ids):
        return None
    when, speed, lat, lon = _time(obj.get("event_time")), *(_number(obj.get(k)) for k in ("speed_kmh", "lat", "lon"))
    if when is None or speed is None or lat is None or lon is None:
        return None
    if not (0 <= speed <= 400 and -90 <= lat <= 90 and -180 <= lon <= 180) or when > ingest + AHEAD:
        return None
    return Ping(ids[0], ids[1], when, speed, lat, lon)


def zones() -> list[dict]:
    text = resources.files("speedlayer.data").joinpath("zones.csv").read_text()
    return list(csv.DictReader(text.splitlines()))


def zone_of(ping: Ping, table: list[dict]) -> dict:
    return next(z for z in table if float(z["min_lat"]) <= ping.lat <= float(z["max_lat"])
                and float(z["min_lon"]) <= ping.lon <= float(z["max_lon"]))


def kafka_parsed(records) -> list[tuple[str, str, Ping | None]]:
    """(``partition/offset``, value, ping or None when malformed) of Kafka records (``timestamp_ms``: the ingest time)."""
    return [(f"{r.partition}/{r.offset}", r.value,
             parse(r.value, datetime.fromtimestamp(r.timestamp_ms / 1000, timezone.utc).replace(tzinfo=None)))
            for r in records]


def kafka_pings(records) -> list[Ping]:
    """The pings of Kafka records, each event once, bad ones left out."""
    return first_copies([p for _, _, p in kafka_parsed(records) if p is not None])


def first_copies(pings: list[Ping]) -> list[Ping]:
    """Each event once (re-sent copies are byte for byte the same in the generator's data)."""
    seen, kept = set(), []
    for ping in pings:
        if ping.event_id not in seen:
            seen.add(ping.event_id)
            kept.append(ping)
    return kept


def _window_start(t: datetime, size: timedelta) -> datetime:
    return EPOCH + ((t - EPOCH) // size) * size


def windows(pings: list[Ping], size: timedelta, closed_by: datetime) -> dict[tuple, dict]:
    """(window_start, window_end, vehicle_id) -> events, avg, max, over-limit count; closed windows only."""
    table, groups = zones(), {}
    for p in pings:
        start = _window_start(p.event_time, size)
        groups.setdefault((start, start + size, p.vehicle_id), []).append(p)
    return {key: {"events": len(ps), "avg_speed_kmh": sum(p.speed_kmh for p in ps) / len(ps),
                  "max_speed_kmh": max(p.speed_kmh for p in ps),
                  "over_limit_events": sum(p.speed_kmh > float(zone_of(p, table)["speed_limit_kmh"]) for p in ps)}
            for key, ps in groups.items() if key[1] <= closed_by}


def latest_sliding(pings: list[Ping], size: timedelta, slide: timedelta, closed_by: datetime) -> dict[str, dict]:
    """Per vehicle, its latest closed sliding window: window_end, events, average speed."""
    groups: dict[tuple, list[Ping]] = {}
    for p in pings:
        start = _window_start(p.event_time, slide)
        while start > p.event_time - size:
            groups.setdefault((start + size, p.vehicle_id), []).append(p)
            start -= slide
    latest: dict[str, dict] = {}
    for (end, vehicle), ps in groups.items():
        if end <= closed_by and (vehicle not in latest or end > latest[vehicle]["window_end"]):
            latest[vehicle] = {"window_end": end, "events": len(ps), "avg_speed_kmh": sum(p.speed_kmh for p in ps) / len(ps)}
    return latest


def alerts(pings: list[Ping]) -> dict[str, float]:
    """event_id -> excess over the zone's limit, for every ping above it."""
    table, found = zones(), {}
    for p in pings:
        limit = float(zone_of(p, table)["speed_limit_kmh"])
        if p.speed_kmh > limit:
            found[p.event_id] = round(p.speed_kmh - limit, 1)
    return found


def congestion(pings: list[Ping], closed_by: datetime) -> dict[tuple, dict]:
    """(window_start, zone_id) -> events and average speed per zone and minute; closed minutes only."""
    table, groups = zones(), {}
    minute = timedelta(minutes=1)
    for p in pings:
        start = _window_start(p.event_time, minute)
        groups.setdefault((start, zone_of(p, table)["zone_id"]), []).append(p)
    return {key: {"events": len(ps), "avg_speed_kmh": sum(p.speed_kmh for p in ps) / len(ps)}
            for key, ps in groups.items() if key[0] + minute <= closed_by}


def haversine_km(a: tuple[float, float], b: tuple[float, float]) -> float:
    """Great-circle distance between two (lat, lon) points in degrees, on the sphere of 6371.0088 km."""
    la1, lo1, la2, lo2 = map(math.radians, (*a, *b))
    h = math.sin((la2 - la1) / 2) ** 2 + math.cos(la1) * math.cos(la2) * math.sin((lo2 - lo1) / 2) ** 2
    return 2 * 6371.0088 * math.asin(math.sqrt(h))


def trips(pings: list[Ping], gap: timedelta, max_trip: timedelta, closed_by: datetime | None = None) -> dict[tuple, dict]:
    """(vehicle_id, trip_start) -> trip_end, pings, distance_km, avg and max speed of each trip.

    A vehicle's pings, in time order (ties by position), make one trip while each comes at most
    ``gap`` after the one before and in the same multiple of ``max_trip`` since the epoch; the
    distance sums the haversine legs between consecutive pings. With ``closed_by`` (a stream's
    watermark) only trips whose last ping plus the gap is at or before it.
    """
    found: dict[tuple, dict] = {}
    current: dict[str, dict] = {}
    for p in sorted(pings, key=lambda p: (p.vehicle_id, p.event_time, p.lat, p.lon)):
        trip = current.get(p.vehicle_id)
        if (trip is None or p.event_time - trip["trip_end"] > gap
                or (p.event_time - EPOCH) // max_trip != (trip["trip_end"] - EPOCH) // max_trip):
            trip = current[p.vehicle_id] = found[(p.vehicle_id, p.event_time)] = {
                "trip_end": p.event_time, "pings": 0, "distance_km": 0.0, "speeds": [], "at": (p.lat, p.lon)}
        trip["distance_km"] += haversine_km(trip["at"], (p.lat, p.lon))
        trip.update(trip_end=p.event_time, pings=trip["pings"] + 1, at=(p.lat, p.lon))
        trip["speeds"].append(p.speed_kmh)
    return {key: {"trip_end": t["trip_end"], "duration_s": (t["trip_end"] - key[1]).total_seconds(), "pings": t["pings"],
                  "distance_km": t["distance_km"], "avg_speed_kmh": sum(t["speeds"]) / len(t["speeds"]),
                  "max_speed_kmh": max(t["speeds"])}
            for key, t in found.items() if closed_by is None or t["trip_end"] + gap <= closed_by}
