"""Trips: per vehicle, a trip ending after ``--trip-gap`` (5 min) without pings, or at a ``--max-trip`` cut.

Trips are also cut at every multiple of ``--max-trip`` (1 h) counted from the epoch (UTC), so that
no trip is longer. The cut is aligned, not counted from the trip's start, so it is the same on a
static DataFrame and a stream whatever the trip's start.

A state processor computes them (``TripProcessor``, keyed by a group of vehicles): each
open trip is its start, its last ping and running sums, never its path, so the state per vehicle
stays the same size however long the trip; pings wait in state until the watermark passes them and
are then applied in event-time order. The rows are those of Spark's session windows over
(vehicle, cut), which computed trips before: a ping at exactly the last one plus the gap goes on the
trip, the distance is the haversine length of the path sorted by time, then position. On a static
DataFrame the same processor runs once per group over all its pings.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from speedlayer.core.durations import format_duration
from speedlayer.core.errors import ConfigError
from speedlayer.pipelines.base import Params
from speedlayer.pipelines.fleet.groups import GroupProcessor, vehicle_group, vehicle_runs
from speedlayer.pipelines.fleet.options import fleet_options
from speedlayer.pipelines.fleet.trip_track import Pings, Trip, TripRules, advance, final, trips_from_table, trips_to_table
from speedlayer.pipelines.ops import ready_for_state

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


#: vehicles are spread over this many groups, each one key of the processor's state; the number is
#: part of the checkpoint (another one reads none of the state it wrote)
TRIP_GROUPS = 16


def trip_rules(params: Params) -> TripRules:
    """The trip gap and the maximum trip of a run, in microseconds.

    >>> trip_rules(Params()).gap_us
    300000000
    """
    opts = fleet_options(params)
    return TripRules(gap_us=opts.trip_gap_ms * 1000, max_trip_us=opts.max_trip_ms * 1000)


def trips(events: DataFrame, params: Params) -> DataFrame:
    """One row per trip: start, end (last ping), duration, pings, distance, average and max speed.

    A trip ends after ``trip_gap_ms`` without a ping, and at every multiple of ``max_trip_ms``. On a
    stream each trip comes out once, when the watermark reaches its last ping plus the gap.

    >>> trips(events_df, Params()).columns  # doctest: +SKIP
    ['vehicle_id', 'trip_start', 'trip_end', 'duration_s', 'pings', 'distance_km', 'avg_speed_kmh', 'max_speed_kmh']
    """
    pings = ready_for_state(events).select(
        vehicle_group("vehicle_id", TRIP_GROUPS),
        *(F.unix_micros("event_time").alias(c) if c == "event_us" else F.col(c) for c in INPUT_COLUMNS))
    return pings.groupBy("_group").transformWithStateInPandas(
        statefulProcessor=TripProcessor(trip_rules(params), batch=not events.isStreaming), outputStructType=TRIP_SCHEMA,
        outputMode="Append", timeMode="EventTime",
    )


def check_trip_gap(params: Params) -> None:
    """A trip gap shorter than the watermark is refused: the watermark is the event-time disorder the
    job tolerates (pings' clocks jitter by that much), so a shorter pause is noise, not a stop. A
    maximum trip no longer than the gap is refused too."""
    opts = fleet_options(params)
    if opts.trip_gap_ms < params.watermark_ms:
        raise ConfigError(
            f"--trip-gap {format_duration(opts.trip_gap_ms)} is shorter than --watermark "
            f"{format_duration(params.watermark_ms)}: a pause shorter than the event-time disorder the job tolerates "
            f"would split trips; use --trip-gap {format_duration(params.watermark_ms)} or more (default 5min)"
        )
    if opts.max_trip_ms <= opts.trip_gap_ms:
        raise ConfigError(
            f"--max-trip {format_duration(opts.max_trip_ms)} is not longer than --trip-gap "
            f"{format_duration(opts.trip_gap_ms)}: every trip would be cut before a pause could end it; "
            "use a --max-trip of several gaps (default 1h)"
        )
