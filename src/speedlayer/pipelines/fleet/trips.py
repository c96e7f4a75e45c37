"""Trips: per vehicle, a trip ending after ``--trip-gap`` (5 min) without pings, or at a ``--max-trip`` cut.

Trips are also cut at every multiple of ``--max-trip`` (1 h) counted from the epoch (UTC), so that
no trip is longer. The cut is aligned, not counted from the trip's start, so it is the same on a
static DataFrame and a stream whatever the trip's start.

A state processor computes them (``speedlayer.state.trips``, keyed by a group of vehicles): each
open trip is its start, its last ping and running sums, never its path, so the state per vehicle
stays the same size however long the trip; pings wait in state until the watermark passes them and
are then applied in event-time order. The rows are those of Spark's session windows over
(vehicle, cut), which computed trips before: a ping at exactly the last one plus the gap goes on the
trip, the distance is the haversine length of the path sorted by time, then position. On a static
DataFrame the same processor runs once per group over all its pings.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.core.durations import format_duration
from speedlayer.core.errors import ConfigError
from speedlayer.pipelines.base import Params
from speedlayer.pipelines.fleet.groups import vehicle_group
from speedlayer.pipelines.fleet.options import fleet_options
from speedlayer.pipelines.ops import ready_for_state
from speedlayer.state.trip_track import TripRules
from speedlayer.state.trips import INPUT_COLUMNS, TRIP_SCHEMA, TripProcessor

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
