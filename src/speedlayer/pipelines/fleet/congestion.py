"""Zone congestion: average speed per speed-limit zone per minute.

Meant for update mode (each batch rewrites only the zone-minutes it touched, like DStream's
``mapWithState``) or complete mode (each batch rewrites every zone-minute kept in state, like
``updateStateByKey``); see docs/state-windows.md for the cost of each.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.core.durations import spark_interval
from speedlayer.pipelines.base import Params
from speedlayer.pipelines.fleet.windows import with_speed_limit
from speedlayer.pipelines.ops import flatten_window

CONGESTION_WINDOW_MS = 60_000


def zone_congestion(events: DataFrame, params: Params) -> DataFrame:
    """Per zone and minute: events, vehicles seen, average speed and its ratio to the zone's limit.

    >>> zone_congestion(events_df, Params()).columns  # doctest: +SKIP
    ['window_start', 'window_end', 'zone_id', 'zone_name', 'speed_limit_kmh', 'events', 'avg_speed_kmh', 'limit_ratio']
    """
    grouped = (
        with_speed_limit(events, params)
        .groupBy(F.window("event_time", spark_interval(CONGESTION_WINDOW_MS)), "zone_id", "zone_name", "speed_limit_kmh")
        .agg(F.count(F.lit(1)).alias("events"), F.avg("speed_kmh").alias("avg_speed_kmh"))
    )
    return flatten_window(grouped.select("*", (F.col("avg_speed_kmh") / F.col("speed_limit_kmh")).alias("limit_ratio")))
