"""The trips rules without Spark: a vehicle's trips not yet written, and ``advance``, which applies pings to them.

A trip goes on while each ping comes at most ``gap_us`` after the one before (Spark's session
windows take a ping at exactly the last one plus the gap into the session) and in the same
multiple of ``max_trip_us`` since the epoch. A trip is final once the watermark reaches its last
ping plus the gap: any ping still to come is after the watermark, so more than the gap later.

A trip holds its start, its last ping and running sums, never its path: its state is the same
size after ten pings and after ten thousand. ``speedlayer.pipelines.fleet.trips`` keeps many vehicles' trips
in one state value and calls ``advance`` for each vehicle with pings the watermark passed, in
event-time order.

>>> rules = TripRules(gap_us=300_000_000, max_trip_us=3_600_000_000)
>>> trips = []
>>> advance(rules, trips, Pings(np.array([0, 60_000_000, 400_000_000]), np.array([52.5, 52.5, 52.6]),
...                             np.array([13.4, 13.41, 13.4]), np.array([20.0, 40.0, 30.0])))
>>> [(t.start_us, t.last_us, t.pings, round(t.km, 3), t.speed_sum / t.pings) for t in trips]
[(0, 60000000, 2, 0.677, 30.0), (400000000, 400000000, 1, 0.0, 30.0)]
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields

import numpy as np
import pyarrow as pa

from speedlayer.pipelines.fleet.geo import NUMPY, haversine_km


@dataclass(frozen=True)
class TripRules:
    """When trips end; durations in microseconds, the resolution of Spark's timestamps."""

    gap_us: int = 300_000_000
    max_trip_us: int = 3_600_000_000


@dataclass
class Trip:
    """A trip so far: its first ping, its last applied ping, and sums over its pings."""

    start_us: int
    last_us: int
    last_lat: float
    last_lon: float
    pings: int = 0
    speed_sum: float = 0.0
    speed_max: float = float("-inf")
    km: float = 0.0

    def row(self, vehicle: str) -> tuple:
        """The output row: vehicle, start, end (µs), duration (s), pings, distance, average and max speed."""
        return (vehicle, self.start_us, self.last_us, (self.last_us - self.start_us) / 1e6, self.pings, self.km,
                self.speed_sum / self.pings, self.speed_max)


@dataclass
class Pings:
    """One vehicle's pings as numpy arrays, sorted by time, then position (``t``: epoch microseconds)."""

    t: np.ndarray
    lat: np.ndarray
    lon: np.ndarray
    speed: np.ndarray


def _fold(total: float, values: np.ndarray) -> float:
    """``total`` plus each of ``values`` in turn, left to right: the same bits however the values were split
    between calls (``np.sum`` adds pairwise, which would not be)."""
    return float(np.cumsum(np.concatenate(([total], values)))[-1]) if len(values) else total


def advance(rules: TripRules, trips: list[Trip], pings: Pings) -> None:
    """Apply one vehicle's ``pings`` to its ``trips`` (oldest first): the last one goes on or new ones start.

    Numpy does the per-ping arithmetic (legs, where a trip starts); Python runs per trip.
    """
    t, lat, lon = pings.t, pings.lat, pings.lon
    if not len(t):
        return
    last = trips[-1] if trips else None
    prev_t = np.concatenate(([last.last_us if last else t[0]], t[:-1]))
    prev_lat = np.concatenate(([last.last_lat if last else lat[0]], lat[:-1]))
    prev_lon = np.concatenate(([last.last_lon if last else lon[0]], lon[:-1]))
    starts_trip = ((t - prev_t) > rules.gap_us) | (t // rules.max_trip_us != prev_t // rules.max_trip_us)
    starts_trip[0] |= last is None
    leg_km = np.where(starts_trip, 0.0, haversine_km(prev_lat, prev_lon, lat, lon, NUMPY))
    bounds = np.concatenate(([0], np.flatnonzero(starts_trip[1:]) + 1, [len(t)])).tolist()
    for a, b in zip(bounds[:-1], bounds[1:]):
        if starts_trip[a]:
            last = Trip(int(t[a]), int(t[a]), float(lat[a]), float(lon[a]))
            trips.append(last)
        last.km = _fold(last.km, leg_km[a:b])
        last.speed_sum = _fold(last.speed_sum, pings.speed[a:b])
        last.speed_max = max(last.speed_max, float(pings.speed[a:b].max()))
        last.pings += b - a
        last.last_us, last.last_lat, last.last_lon = int(t[b - 1]), float(lat[b - 1]), float(lon[b - 1])


def final(rules: TripRules, trip: Trip, watermark_us: int) -> bool:
    """Whether no ping can join ``trip`` any more: the watermark reached its last ping plus the gap (Spark
    closes a session window whose end is at or before the watermark)."""
    return trip.last_us + rules.gap_us <= watermark_us


_TRIP_TYPES = {"start_us": pa.int64(), "last_us": pa.int64(), "last_lat": pa.float64(), "last_lon": pa.float64(),
               "pings": pa.int64(), "speed_sum": pa.float64(), "speed_max": pa.float64(), "km": pa.float64()}
TRIPS_SCHEMA = pa.schema([pa.field("vehicle_id", pa.string()), *(pa.field(f.name, _TRIP_TYPES[f.name]) for f in fields(Trip))])


def trips_to_table(trips: dict[str, list[Trip]]) -> pa.Table:
    """Vehicles' trips as one Arrow table, a row per trip (a column per ``Trip`` field), for the state value.

    >>> trips_from_table(trips_to_table({"V1": [Trip(5, 9, 52.5, 13.4, pings=2)]}))["V1"][0].last_us
    9
    """
    rows = [(vehicle, *astuple(trip)) for vehicle, own in trips.items() for trip in own]
    columns = list(zip(*rows)) or [()] * len(TRIPS_SCHEMA)
    return pa.Table.from_arrays([pa.array(list(col), field.type) for col, field in zip(columns, TRIPS_SCHEMA)],
                                schema=TRIPS_SCHEMA)


def trips_from_table(table: pa.Table) -> dict[str, list[Trip]]:
    """The trips of ``trips_to_table``, by vehicle, oldest first."""
    data = table.to_pydict()
    out: dict[str, list[Trip]] = {}
    for vehicle, row in zip(data.pop("vehicle_id"), zip(*data.values())):
        out.setdefault(vehicle, []).append(Trip(*row))
    return out
