"""Trips: session windows per vehicle, a trip ending after ``--trip-gap`` (5 min) without pings.

A vehicle that never stops for ``--trip-gap`` would hold one trip open for good, its path growing
in state with every ping. So trips are also cut at every multiple of ``--max-trip`` (1 h) counted
from the epoch (UTC): a trip is at most that long, and its state is dropped once the watermark
passes the cut plus the gap. The cut is aligned, not counted from the trip's start, so that it is
a plain grouping column (no state of its own) and the same on a static DataFrame and a stream.

The distance is the haversine length of the trip's path, computed in the JVM: the session
collects its (time, lat, lon) points, sorts them by time and sums consecutive legs with
higher-order functions, so the same function gives the same trip on a static DataFrame and on a
stream (Spark's session windows take append and complete mode, not update).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.core.durations import format_duration, spark_interval
from speedlayer.core.errors import ConfigError
from speedlayer.core.geo import path_length_km
from speedlayer.pipelines.base import Params
from speedlayer.pipelines.fleet.options import fleet_options


def trips(events: DataFrame, params: Params) -> DataFrame:
    """One row per trip: start, end (last ping), duration, pings, distance, average and max speed.

    A trip ends after ``trip_gap_ms`` without a ping, and at every multiple of ``max_trip_ms``.

    >>> trips(events_df, Params(trip_gap_ms=300_000)).columns  # doctest: +SKIP
    ['vehicle_id', 'trip_start', 'trip_end', 'duration_s', 'pings', 'distance_km', 'avg_speed_kmh', 'max_speed_kmh']
    """
    opts = fleet_options(params)
    cut = F.floor(F.unix_millis("event_time") / F.lit(opts.max_trip_ms)).alias("_trip_cut")
    session = events.groupBy(F.session_window("event_time", spark_interval(opts.trip_gap_ms)), "vehicle_id", cut).agg(
        F.min("event_time").alias("trip_start"),
        F.max("event_time").alias("trip_end"),
        F.count(F.lit(1)).alias("pings"),
        F.avg("speed_kmh").alias("avg_speed_kmh"),
        F.max("speed_kmh").alias("max_speed_kmh"),
        # Sorted by time, then position: a deterministic path whatever order the pings came in.
        F.array_sort(F.collect_list(F.struct("event_time", "lat", "lon"))).alias("path"),
    )
    return session.select(
        "vehicle_id", "trip_start", "trip_end",
        ((F.unix_micros("trip_end") - F.unix_micros("trip_start")) / 1e6).alias("duration_s"),
        "pings",
        path_length_km(F.col("path")).alias("distance_km"),
        "avg_speed_kmh", "max_speed_kmh",
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
