"""``generator://?kind=rides`` — ride requests ``{request_id, rider_id, pickup_lat, pickup_lon, request_time}``, in the JVM.

Request ``n`` is a pure function of (seed, n, start, rate), like the vehicle pings. Its pickup is
placed up to ``PICKUP_SPREAD_KM`` from where one of the ``vehicles`` of the same seed is at the
request time (``vehicle_path``), so with the same seed, start and vehicles as the pings a request
has vehicles close by and the fleet job's ``matches`` output finds candidates. The generator's
``disorder``, ``late``, ``duplicates`` (re-sent ``request_id``) and ``malformed`` options apply;
malformed payloads are cut short, miss ``rider_id``, carry a pickup off the globe or a time that is
not one, or are not JSON at all.

    generator://?kind=rides&rate=50&seed=7&riders=5000
"""

from __future__ import annotations

import math

from pydantic import Field
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.pipelines.fleet.vehicle_kind import KM_PER_DEG_LAT, KM_PER_DEG_LON, VehicleOptions, vehicle_path
from speedlayer.sources.generator_kit import corrupt, iso_time, kind_options, metadata, timeline, uniform

#: farthest a pickup lies from the vehicle it was placed by, in km
PICKUP_SPREAD_KM = 0.3
PAYLOAD_FIELDS = ("request_id", "rider_id", "pickup_lat", "pickup_lon", "request_time")


class RideOptions(VehicleOptions):
    """``generator://?kind=rides``: the fleet's options (pickups lie near its vehicles) and the riders."""

    riders: int = Field(5000, gt=0, description="riders requesting rides")


@kind_options(RideOptions)
def ride_events(seq: DataFrame, opts: RideOptions, start_ms: int) -> DataFrame:
    """RAW rows of ride requests for a DataFrame of sequence numbers ``n``; key = the rider.

    >>> ride_events(spark.range(3).withColumnRenamed("id", "n"), RideOptions(kind="rides"), 0)  # doctest: +SKIP
    """
    c, seed = F.col, opts.seed
    df = timeline(seq, opts, start_ms)
    src = c("src")
    df = df.select("n", "src", "event_ms",
                   F.floor(uniform(seed, src, 10) * opts.riders).cast("long").alias("rider"),
                   F.floor(uniform(seed, src, 11) * opts.vehicles).cast("long").alias("vehicle"))
    df = vehicle_path(df, seed, start_ms)
    bearing = 2 * math.pi * uniform(seed, src, 12)
    # sqrt: uniform over the disc around the vehicle, not crowded at its centre
    spread_km = PICKUP_SPREAD_KM * F.sqrt(uniform(seed, src, 13))
    df = df.select(
        "n", "src",
        F.format_string("r-%07d", src).alias("request_id"),
        F.format_string("R%05d", c("rider")).alias("rider_id"),
        F.round(c("lat") + spread_km * F.sin(bearing) / KM_PER_DEG_LAT, 6).alias("pickup_lat"),
        F.round(c("lon") + spread_km * F.cos(bearing) / KM_PER_DEG_LON, 6).alias("pickup_lon"),
        iso_time(c("event_ms")).alias("request_time"),
    )
    good = F.to_json(F.struct(*PAYLOAD_FIELDS))
    bad = uniform(seed, src, 7) < opts.malformed
    value = F.when(bad, corrupt(good, seed, src, [
        F.to_json(F.struct(*(f for f in PAYLOAD_FIELDS if f != "rider_id"))),
        F.to_json(F.struct("request_id", "rider_id", F.lit(123.456).alias("pickup_lat"), "pickup_lon", "request_time")),
        F.to_json(F.struct("request_id", "rider_id", "pickup_lat", "pickup_lon", F.lit("soon").alias("request_time"))),
    ])).otherwise(good)
    return df.select(value.alias("value"), *metadata(opts, start_ms, c("rider_id")))
