"""Ride matching: ride requests joined to the vehicle pings near their pickup, close to the request time.

A stream-stream inner join. Both sides carry a watermark (the fleet's ``--watermark``: pings on
``event_time``, requests on ``request_time``) and the join condition bounds the time between them
(``--match-within``), so Spark can tell when a ping or a request can no longer meet a partner and
drops it from the join's state: the state holds about ``--watermark`` + ``--match-within`` of each
stream, however long the job runs.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.core.errors import ConfigError
from speedlayer.pipelines.base import Params
from speedlayer.pipelines.fleet.geo import grid_cell, haversine_km, nearby_cells
from speedlayer.pipelines.fleet.options import fleet_options
from speedlayer.pipelines.fleet.windows import drop_duplicate_events
from speedlayer.pipelines.ops import with_watermark


def check_matching(params: Params) -> None:
    """The matching settings must be above zero (``--match-within``, ``--match-cell``)."""
    opts = fleet_options(params)
    if opts.match_within_ms <= 0:
        raise ConfigError("--match-within must be longer than zero: e.g. --match-within 10s")
    if not opts.match_cell_m > 0:
        raise ConfigError(f"--match-cell is the grid cell size in metres and must be above zero (got {opts.match_cell_m:g}): "
                          "e.g. --match-cell 500")


def clean_requests(requests: DataFrame, params: Params) -> DataFrame:
    """Decoded ride requests with a watermark on ``request_time``, re-sent requests dropped by ``request_id``."""
    return drop_duplicate_events(with_watermark(requests, params, "request_time"), params, "request_id")


def ride_matches(pings: DataFrame, requests: DataFrame, params: Params) -> DataFrame:
    """Candidate vehicles for each ride request: every ping within ``match_cell_m`` metres of the
    pickup and ``match_within_ms`` of the request time (either side).

    ``pings`` are the fleet's clean vehicle events (watermarked, re-sends dropped); ``requests`` are
    decoded ride requests. Pings are bucketed into grid cells of ``match_cell_m``; each request is
    joined to its own cell and the eight around it, then pairs farther than ``match_cell_m`` are
    dropped, so the result does not depend on where the cell borders fall.

    >>> ride_matches(clean_pings, decoded_requests, Params()).columns  # doctest: +SKIP
    ['request_id', 'rider_id', 'request_time', 'pickup_cell', 'vehicle_id', 'ping_time', 'distance_m']
    """
    opts = fleet_options(params)
    cell_m = float(opts.match_cell_m)
    row, col = grid_cell(F.col("lat"), F.col("lon"), cell_m)
    near = pings.select("vehicle_id", F.col("event_time").alias("ping_time"), F.col("lat").alias("ping_lat"),
                        F.col("lon").alias("ping_lon"), row.alias("ping_row"), col.alias("ping_col"))
    p_row, p_col = grid_cell(F.col("pickup_lat"), F.col("pickup_lon"), cell_m)
    asked = (clean_requests(requests, params)
             .select("request_id", "rider_id", "request_time", "pickup_lat", "pickup_lon",
                     F.format_string("%d:%d", p_row, p_col).alias("pickup_cell"),
                     F.explode(nearby_cells(F.col("pickup_lat"), F.col("pickup_lon"), cell_m)).alias("cell")))
    within = F.expr(f"INTERVAL {int(opts.match_within_ms)} MILLISECONDS")
    joined = near.join(
        asked,
        (F.col("ping_row") == F.col("cell.row")) & (F.col("ping_col") == F.col("cell.col"))
        & (F.col("ping_time") >= F.col("request_time") - within)
        & (F.col("ping_time") <= F.col("request_time") + within),
        "inner",
    )
    distance_m = haversine_km(F.col("pickup_lat"), F.col("pickup_lon"), F.col("ping_lat"), F.col("ping_lon")) * 1000
    return (joined.select("request_id", "rider_id", "request_time", "pickup_cell", "vehicle_id", "ping_time",
                          distance_m.alias("distance_m"))
            .where(F.col("distance_m") <= cell_m)
            .withColumn("distance_m", F.round("distance_m", 1)))
