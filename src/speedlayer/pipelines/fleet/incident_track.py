"""The incidents rules without Spark: one vehicle's track, and ``advance``, which applies pings to it.

``speedlayer.pipelines.fleet.incidents`` keeps many vehicles' tracks in one state value and calls
``advance`` for each vehicle that has pings the watermark passed, in event-time order.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields

import numpy as np
import pyarrow as pa

from speedlayer.pipelines.fleet.geo import NUMPY, haversine_km


@dataclass(frozen=True)
class IncidentRules:
    """When incidents open and close; durations in milliseconds."""

    after_ms: int = 10_000
    timeout_ms: int = 30_000
    updates: bool = False


@dataclass
class Track:
    """One vehicle's state: its last applied ping, and the over-limit run it is in (if any)."""

    last_ms: int | None = None
    last_lat: float | None = None
    last_lon: float | None = None
    seen_ms: int | None = None      # newest event time received (applied or waiting)
    run_start_ms: int | None = None
    run_last_ms: int | None = None
    run_zone: str | None = None
    run_max: float | None = None
    run_excess: float | None = None
    run_km: float | None = None
    run_pings: int | None = None
    opened: bool | None = None
    emitted_ms: int | None = None   # run_last_ms of the last "open" update sent

    def end_run(self) -> None:
        for name in ("run_start_ms", "run_last_ms", "run_zone", "run_max", "run_excess", "run_km", "run_pings",
                     "opened", "emitted_ms"):
            setattr(self, name, None)

    def incident(self, vehicle: str, closed_by: str | None, closed_at_ms: int | None) -> tuple:
        """The output row of the current run."""
        return (vehicle, self.run_start_ms, self.run_last_ms, (self.run_last_ms - self.run_start_ms) / 1000.0,
                self.run_zone, self.run_max, self.run_excess, self.run_km, self.run_pings,
                "open" if closed_by is None else "closed", closed_by, closed_at_ms, self.last_lat, self.last_lon)


_TRACK_TYPES = {"last_ms": pa.int64(), "last_lat": pa.float64(), "last_lon": pa.float64(), "seen_ms": pa.int64(),
                "run_start_ms": pa.int64(), "run_last_ms": pa.int64(), "run_zone": pa.string(),
                "run_max": pa.float64(), "run_excess": pa.float64(), "run_km": pa.float64(), "run_pings": pa.int64(),
                "opened": pa.bool_(), "emitted_ms": pa.int64()}
TRACKS_SCHEMA = pa.schema([pa.field("vehicle_id", pa.string()),
                           *(pa.field(f.name, _TRACK_TYPES[f.name]) for f in fields(Track))])


def tracks_to_table(tracks: dict[str, Track]) -> pa.Table:
    """Vehicles' tracks as one Arrow table (a column per ``Track`` field), for the state value.

    >>> tracks_from_table(tracks_to_table({"V1": Track(last_ms=5)}))["V1"].last_ms
    5
    """
    columns = list(zip(*(astuple(t) for t in tracks.values()))) or [()] * len(fields(Track))
    arrays = [pa.array(list(tracks), pa.string())]
    arrays += [pa.array(list(col), TRACKS_SCHEMA.field(i + 1).type) for i, col in enumerate(columns)]
    return pa.Table.from_arrays(arrays, schema=TRACKS_SCHEMA)


def tracks_from_table(table: pa.Table) -> dict[str, Track]:
    """The tracks of ``tracks_to_table``, by vehicle."""
    data = table.to_pydict()
    vehicles = data.pop("vehicle_id")
    return {v: Track(*row) for v, row in zip(vehicles, zip(*data.values()))}


@dataclass
class Pings:
    """One vehicle's pings as numpy arrays, sorted by ``t`` (event time in epoch milliseconds)."""

    t: np.ndarray
    speed: np.ndarray
    excess: np.ndarray   # km/h above the limit of the ping's zone (> 0: over the limit)
    lat: np.ndarray
    lon: np.ndarray
    zone: np.ndarray

    def __len__(self) -> int:
        return len(self.t)


def advance(rules: IncidentRules, vehicle: str, track: Track, pings: Pings) -> list[tuple]:
    """Apply ``pings`` to ``track``; return the incidents they close.

    Works block by block (a block: consecutive pings on the same side of the limit with no silence
    longer than the timeout inside), with numpy doing the per-ping arithmetic; Python runs per block.
    """
    closed: list[tuple] = []
    if not len(pings):
        return closed
    t, lat, lon = pings.t, pings.lat, pings.lon
    over = pings.excess > 0
    known = track.last_ms is not None
    prev_t = np.concatenate(([track.last_ms if known else t[0]], t[:-1]))
    prev_lat = np.concatenate(([track.last_lat if known else lat[0]], lat[:-1]))
    prev_lon = np.concatenate(([track.last_lon if known else lon[0]], lon[:-1]))
    silence = (t - prev_t) > rules.timeout_ms  # the vehicle was silent longer than the timeout before this ping
    step_km = np.where(silence, 0.0, haversine_km(prev_lat, prev_lon, lat, lon, NUMPY))
    starts = np.flatnonzero(np.concatenate(([True], (over[1:] != over[:-1]) | silence[1:])))
    ends = np.concatenate((starts[1:], [len(t)]))
    for a, b in zip(starts.tolist(), ends.tolist()):
        if silence[a]:
            if track.opened:
                closed.append(track.incident(vehicle, "timeout", track.last_ms + rules.timeout_ms))
            track.end_run()
        if over[a]:
            if track.run_start_ms is None:
                track.run_start_ms, track.run_zone, track.run_km, track.run_pings = int(t[a]), pings.zone[a], 0.0, 0
                track.run_max = track.run_excess = -np.inf
                km = step_km[a + 1:b].sum()
            else:  # the run goes on from the previous call's last ping
                km = step_km[a:b].sum()
            track.run_km = float(track.run_km + km)
            track.run_pings += b - a
            track.run_max = float(max(track.run_max, pings.speed[a:b].max()))
            track.run_excess = float(max(track.run_excess, pings.excess[a:b].max()))
            track.run_last_ms = int(t[b - 1])
            track.opened = track.run_last_ms - track.run_start_ms >= rules.after_ms
        elif track.run_start_ms is not None:
            if track.opened:
                closed.append(track.incident(vehicle, "speed", int(t[a])))
            track.end_run()
        track.last_ms, track.last_lat, track.last_lon = int(t[b - 1]), float(lat[b - 1]), float(lon[b - 1])
    return closed
