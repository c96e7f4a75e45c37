"""The fleet's per-event outputs and windows: speed limits by zone, tumbling and sliding windows, alerts.

Pure DataFrame functions: the same code runs on a static DataFrame (tests, backfills) and on a stream.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.core.durations import spark_interval
from speedlayer.pipelines.base import Params
from speedlayer.pipelines.dedup import drop_duplicates
from speedlayer.pipelines.fleet.options import fleet_options
from speedlayer.pipelines.fleet.zones import load_zones, zone_fields, zone_index
from speedlayer.pipelines.ops import flatten_window, with_watermark


def drop_duplicate_events(events: DataFrame, params: Params, key: str | Sequence[str] = "event_id") -> DataFrame:
    """Drop re-sent events by ``key``, the lowest offset counting (``speedlayer.pipelines.dedup``)."""
    return drop_duplicates(events, params, key)


def with_speed_limit(events: DataFrame, params: Params) -> DataFrame:
    """Add zone_id, zone_name and speed_limit_kmh of the zone each event is in."""
    zones = load_zones(fleet_options(params).zones)
    # the lookup once, in a column of its own: each of the three would otherwise hold it, and a stream
    # plans every expression again in each micro-batch
    zone_id, zone_name, limit = zone_fields(F.col("_zone"), zones)
    return (events.select("*", zone_index("lat", "lon", zones).alias("_zone"))
            .select("*", zone_id.alias("zone_id"), zone_name.alias("zone_name"), limit.alias("speed_limit_kmh"))
            .drop("_zone"))


def speed_windows(events: DataFrame, params: Params) -> DataFrame:
    """Tumbling windows per vehicle: events, average and max speed, events over the limit.

    >>> speed_windows(events_df, Params(window_ms=10_000)).columns  # doctest: +SKIP
    ['window_start', 'window_end', 'vehicle_id', 'events', 'avg_speed_kmh', 'max_speed_kmh', 'over_limit_events']
    """
    over = (F.col("speed_kmh") > F.col("speed_limit_kmh")).cast("int")
    return flatten_window(
        with_speed_limit(events, params)
        .groupBy(F.window("event_time", spark_interval(params.window_ms)), "vehicle_id")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.avg("speed_kmh").alias("avg_speed_kmh"),
            F.max("speed_kmh").alias("max_speed_kmh"),
            F.coalesce(F.sum(over), F.lit(0)).cast("long").alias("over_limit_events"),
        )
    )


def windows_with_lateness(events: DataFrame, params: Params) -> DataFrame:
    """``speed_windows`` plus a ``revision``, with closed windows corrected by events up to
    ``params.allowed_lateness_ms`` behind the watermark (see ``speedlayer.pipelines.fleet.lateness``).

    Takes decoded events without a watermark: this query's Spark watermark is watermark + lateness,
    so that Spark does not drop the events the windows may still take. A static DataFrame has no
    late events: every window is revision 0.

    >>> windows_with_lateness(decoded.events, Params(options=FleetOptions(allowed_lateness="30s"))).columns[-1]  # doctest: +SKIP
    'revision'
    """
    if not events.isStreaming:
        return speed_windows(drop_duplicate_events(events, params), params).withColumn("revision", F.lit(0).cast("long"))
    from speedlayer.pipelines.fleet.lateness import corrected_windows

    lenient = drop_duplicate_events(with_watermark(events, params, extra_ms=fleet_options(params).allowed_lateness_ms), params)
    return corrected_windows(with_speed_limit(lenient, params), params)


def sliding_averages(events: DataFrame, params: Params) -> DataFrame:
    """Sliding windows per vehicle (default 1 min every 10 s): events and average speed."""
    window = F.window("event_time", spark_interval(params.sliding_window_ms), spark_interval(params.slide_ms))
    return flatten_window(
        events.groupBy(window, "vehicle_id").agg(
            F.count(F.lit(1)).alias("events"), F.avg("speed_kmh").alias("avg_speed_kmh")
        )
    )


def overspeed_alerts(events: DataFrame, params: Params) -> DataFrame:
    """One alert per event faster than its zone's limit; stateless, so it runs in continuous mode too."""
    return (
        with_speed_limit(events, params)
        .where(F.col("speed_kmh") > F.col("speed_limit_kmh"))
        .select(
            "event_id", "vehicle_id", "event_time", "speed_kmh", "speed_limit_kmh",
            F.round(F.col("speed_kmh") - F.col("speed_limit_kmh"), 1).alias("excess_kmh"),
            "zone_id", "zone_name", "lat", "lon",
        )
    )
