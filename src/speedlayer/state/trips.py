"""Trips per group of vehicles, run by ``transformWithStateInPandas``: state of constant size per vehicle.

Each vehicle's pings wait in state until the watermark passes them, then join its trip in
event-time order (time, then position, as the sorted path of Spark's session windows had them),
so the result does not depend on how the stream is cut into micro-batches and equals the same
processor run once over a static DataFrame. A trip is written once, when the watermark reaches its
last ping plus the gap (``trip_track.final``), as Spark's session windows in append mode did.

What a group keeps: per vehicle the trips not yet written (the open one, and the one a
``--max-trip`` cut ended until its gap has passed) as a start, a last ping and running sums, plus
the pings still ahead of the watermark. Its size depends on the vehicles and the watermark delay,
not on how long a trip is. The rules themselves are ``speedlayer.state.trip_track``.

    events.groupBy(vehicle_group("vehicle_id", 16)).transformWithStateInPandas(
        TripProcessor(TripRules()), TRIP_SCHEMA, "Append", "EventTime")
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
from pyspark.sql import types as T

from speedlayer.state.groups import GroupProcessor, vehicle_runs
from speedlayer.state.trip_track import Pings, Trip, TripRules, advance, final, trips_from_table, trips_to_table

#: what the processor reads from each ping (``event_us`` is ``event_time`` in epoch microseconds; ``event_time``
#: itself is there so that Spark's late filter, which looks for the watermark column, drops late pings before it)
INPUT_COLUMNS = ("vehicle_id", "event_time", "event_us", "lat", "lon", "speed_kmh")

TRIP_SCHEMA = T.StructType([
    T.StructField("vehicle_id", T.StringType()),
    T.StructField("trip_start", T.TimestampType()),     # first ping
    T.StructField("trip_end", T.TimestampType()),       # last ping
    T.StructField("duration_s", T.DoubleType()),
    T.StructField("pings", T.LongType(), False),
    T.StructField("distance_km", T.DoubleType()),       # haversine along the pings in time order
    T.StructField("avg_speed_kmh", T.DoubleType()),
    T.StructField("max_speed_kmh", T.DoubleType()),
])
OUTPUT_COLUMNS = tuple(f.name for f in TRIP_SCHEMA.fields)

#: one state value per group of vehicles: their trips not yet written and waiting pings (Arrow IPC), and the group's timer
GROUP_STATE_SCHEMA = "trips binary, pending binary, timer_ms long"
_PENDING = pa.schema([("vehicle_id", pa.string()), ("event_us", pa.int64()), ("lat", pa.float64()),
                      ("lon", pa.float64()), ("speed_kmh", pa.float64())])
#: the order pings are applied in: a vehicle's by time, ties by position
_ORDER = ["vehicle_id", "event_us", "lat", "lon"]


def _frame(rows: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(OUTPUT_COLUMNS))
    for name in ("trip_start", "trip_end"):
        df[name] = pd.to_datetime(df[name], unit="us")
    df["pings"] = df["pings"].astype("int64")
    return df


def _arrived(pings: pd.DataFrame) -> pd.DataFrame:
    """The processor's input rows as pending pings (columns of ``_PENDING``)."""
    return pd.DataFrame({"vehicle_id": pings["vehicle_id"].astype(object), "event_us": pings["event_us"].astype("int64"),
                         "lat": pings["lat"].astype(float), "lon": pings["lon"].astype(float),
                         "speed_kmh": pings["speed_kmh"].astype(float)})


def _by_vehicle(pings: pd.DataFrame):
    """(vehicle, Pings) for each vehicle of ``pings``, which is sorted by ``_ORDER``."""
    vehicles = pings["vehicle_id"].to_numpy()
    cols = [pings[c].to_numpy() for c in ("event_us", "lat", "lon", "speed_kmh")]
    for a, b in vehicle_runs(vehicles):
        yield vehicles[a], Pings(*(c[a:b] for c in cols))


def _ceil_ms(us: int) -> int:
    return -(-int(us) // 1000)


class TripProcessor(GroupProcessor):
    """Trips for ``transformWithStateInPandas`` in EventTime mode, keyed by a group of vehicles.

    ``batch=True`` is for a static DataFrame, where all pings of a group come in one call: every
    ping is applied at once and the end of input ends every trip.
    """

    STATE_SCHEMA = GROUP_STATE_SCHEMA
    PENDING = _PENDING
    rules: TripRules

    _arrived = staticmethod(_arrived)
    _frame = staticmethod(_frame)

    def _load(self) -> tuple[dict[str, list[Trip]], pd.DataFrame, int | None]:
        trips, waiting, timer_ms = self._load_group(trips_from_table)
        return trips or {}, waiting, timer_ms

    def _save(self, trips: dict[str, list[Trip]], waiting: pd.DataFrame, timer_ms: int | None, watermark_ms: int) -> None:
        """Store the trips and the pings still waiting, and keep exactly one timer: when the watermark
        passes the oldest waiting ping or makes a trip final, whichever comes first."""
        if not trips and waiting.empty:
            return self._store(None, timer_ms, 0, watermark_ms)
        moments = [trip.last_us + self.rules.gap_us for own in trips.values() for trip in own]
        due = _ceil_ms(min(moments + ([int(waiting["event_us"].min())] if len(waiting) else [])))
        self._save_group(trips_to_table(trips), waiting, timer_ms, due, watermark_ms)

    def _step(self, arrived: pd.DataFrame | None, watermark_ms: int, timer_fired: bool) -> list[tuple]:
        trips, waiting, timer_ms = self._load()
        if timer_fired:
            timer_ms = None  # Spark removes a timer once it fired
        if arrived is not None and not arrived.empty:
            # A ping not after its vehicle's last applied one comes too late to be put in order: skip it
            # (Spark's late filter drops such pings before they get here).
            last = arrived["vehicle_id"].map({v: own[-1].last_us for v, own in trips.items()})
            arrived = arrived[last.isna().to_numpy() | (arrived["event_us"] > last).to_numpy()]
            waiting = pd.concat([waiting, arrived], ignore_index=True) if len(waiting) else arrived
        waiting = waiting.sort_values(_ORDER, kind="stable")
        watermark_us = watermark_ms * 1000
        due = waiting["event_us"].to_numpy() <= watermark_us
        for vehicle, pings in _by_vehicle(waiting[due]):
            advance(self.rules, trips.setdefault(vehicle, []), pings)
        out: list[tuple] = []
        for vehicle, own in list(trips.items()):
            out += [trip.row(vehicle) for trip in own if final(self.rules, trip, watermark_us)]
            trips[vehicle] = [trip for trip in own if not final(self.rules, trip, watermark_us)]
            if not trips[vehicle]:
                del trips[vehicle]
        self._save(trips, waiting[~due], timer_ms, watermark_ms)
        return out

    def _static(self, arrived: pd.DataFrame) -> list[tuple]:
        """A static DataFrame: every ping at once; the end of input ends every trip."""
        out: list[tuple] = []
        for vehicle, pings in _by_vehicle(arrived.sort_values(_ORDER, kind="stable")):
            trips: list[Trip] = []
            advance(self.rules, trips, pings)
            out += [trip.row(vehicle) for trip in trips]
        return out
