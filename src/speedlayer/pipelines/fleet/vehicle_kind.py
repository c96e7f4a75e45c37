"""``generator://?kind=vehicles`` (the default kind): the fleet's vehicle pings, computed in the JVM.

Ping ``n`` is a pure function of (seed, n, start, rate). Vehicles drive circles around Berlin's
centre at speeds that follow each zone's limit, about 3% of them speeding; the generator's
``disorder``, ``late``, ``duplicates`` and ``malformed`` options apply. Declared in the entry-point
group ``speedlayer.generator_kinds`` like any user's kind.

    generator://?rate=5000&vehicles=2000&seed=7&disorder=2s&late=0.005&duplicates=0.01&malformed=0.002
"""

from __future__ import annotations

import math

from pydantic import Field
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from speedlayer.core.durations import parse_duration
from speedlayer.pipelines.fleet.zones import zone_of
from speedlayer.sources.generator_kit import GeneratorOptions, iso_time, kind_options, metadata, uniform

CENTER_LAT, CENTER_LON = 52.5200, 13.4050
#: km per degree of latitude
KM_PER_DEG_LAT = 111.32
#: km per degree of longitude at the centre (east-west distances of the vehicles' paths and the pickups)
KM_PER_DEG_LON = KM_PER_DEG_LAT * math.cos(math.radians(CENTER_LAT))
_MALFORMED_KINDS = 7


def vehicle_path(df: DataFrame, seed: int, start_ms: int) -> DataFrame:
    """``df`` with where each vehicle is at each time: ``lat`` and ``lon`` from columns ``vehicle`` and ``event_ms``.

    A vehicle drives a circle around the centre (its radius, direction, cruise speed and phase are
    stable per seed and vehicle); ``wave`` is the speed's periodic swing. Ride requests use it to
    put pickups where the vehicles of the same seed are.

    >>> vehicle_path(spark.range(1).selectExpr("id AS vehicle", "0L AS event_ms"), 42, 0)  # doctest: +SKIP
    """
    c = F.col

    def trait(salt: int) -> Column:  # per-vehicle, stable over time
        return uniform(seed + 1, c("vehicle"), salt)

    df = df.select(
        "*",
        (1.0 + 14.0 * trait(1)).alias("radius_km"),
        F.when(trait(2) < 0.5, -1.0).otherwise(1.0).alias("direction"),
        (25.0 + 35.0 * trait(3)).alias("cruise_kmh"),
        (60.0 + 240.0 * trait(4)).alias("period_s"),
        (2 * math.pi * trait(5)).alias("phase"),
        (2 * math.pi * trait(6)).alias("angle0"),
        # About 3% of vehicles speed; the rest stay mostly below the local limit.
        F.when(trait(7) < 0.03, 1.12 + 0.3 * trait(8)).otherwise(0.62 + 0.3 * trait(8)).alias("habit"),
    )
    t_s = (c("event_ms") - F.lit(start_ms)) / 1000.0
    df = df.select("*", (2 * math.pi * t_s / c("period_s") + c("phase")).alias("wave"), t_s.alias("t_s"))
    # distance = integral of cruise * (1 + 0.3 sin(wave)) dt, in km
    distance_km = c("cruise_kmh") / 3600.0 * (c("t_s") - 0.3 * c("period_s") / (2 * math.pi) * F.cos(c("wave")))
    df = df.select("*", (c("angle0") + c("direction") * distance_km / c("radius_km")).alias("angle"))
    df = df.select(
        "*",
        F.round(F.lit(CENTER_LAT) + c("radius_km") / KM_PER_DEG_LAT * F.sin(c("angle")), 6).alias("lat"),
        F.round(F.lit(CENTER_LON) + c("radius_km") / KM_PER_DEG_LON * F.cos(c("angle")), 6).alias("lon"),
    )
    return df


class VehicleOptions(GeneratorOptions):
    """``generator://?kind=vehicles`` (the default kind): the generator's options and the fleet's size."""

    vehicles: int = Field(2000, gt=0, description="vehicles pinging (kind=rides: the vehicles pickups are placed near)")


@kind_options(VehicleOptions)
def vehicle_events(seq: DataFrame, opts: VehicleOptions, start_ms: int) -> DataFrame:
    """RAW rows for a DataFrame of sequence numbers ``n`` (long).

    Built as a chain of projections, each naming its results, so that no expression is copied
    into the next (nesting them would grow the plan exponentially).

    >>> vehicle_events(spark.range(3).withColumnRenamed("id", "n"), VehicleOptions(), 0)  # doctest: +SKIP
    """
    seed = opts.seed
    c = F.col
    src = c("src")
    df = vehicle_path(_event_times(seq, opts, start_ms), seed, start_ms)
    df = df.select("*", zone_of("lat", "lon")[2].alias("limit"))
    noise = (uniform(seed, src, 6) - 0.5) * 4
    df = df.select(
        "*",
        F.round(F.greatest(F.lit(0.0), c("limit") * c("habit") * (1 + 0.12 * F.sin(c("wave"))) + noise), 1).alias("speed"),
        iso_time(c("event_ms")).alias("event_time_text"),
    )

    fields = {
        "event_id": F.format_string("e-%06d", src),
        "vehicle_id": F.format_string("V%04d", c("vehicle")),
        "event_time": c("event_time_text"),
        "speed_kmh": c("speed"),
        "lat": c("lat"),
        "lon": c("lon"),
    }

    good = F.to_json(F.struct(*(col.alias(name) for name, col in fields.items())))
    if opts.malformed == 0:
        return df.select(good.alias("value"), *metadata(opts, start_ms, F.format_string("V%04d", c("vehicle"))))
    df = df.select(
        "*", good.alias("good"),
        (uniform(seed, src, 7) < opts.malformed).alias("bad"),
        F.floor(uniform(seed, src, 8) * _MALFORMED_KINDS).alias("kind"),
    )
    return df.select(F.when(c("bad"), _corrupted(c("good"))).otherwise(c("good")).alias("value"),
                     *metadata(opts, start_ms, F.format_string("V%04d", c("vehicle"))))


def _event_times(seq: DataFrame, opts: VehicleOptions, start_ms: int) -> DataFrame:
    """``n``, the event it sends (``src``: itself, or an earlier one re-sent), its event time and vehicle."""
    seed, c = opts.seed, F.col
    # A duplicate re-sends one of the three events before it, byte for byte.
    is_dup = (uniform(seed, c("n"), 1) < opts.duplicates) & (c("n") > 0)
    df = seq.select(
        "n",
        F.when(is_dup, F.greatest(c("n") - 1 - F.floor(uniform(seed, c("n"), 2) * 3), F.lit(0)))
        .otherwise(c("n")).cast("long").alias("src"),
    )
    src = c("src")
    lateness_ms = F.when(
        uniform(seed, src, 3) < opts.late,
        F.floor(F.lit(parse_duration(opts.late_delay)) * (0.5 + uniform(seed, src, 4))),
    ).otherwise(0)
    return df.select(
        "n", "src",
        (F.lit(start_ms) + F.floor(src * (1000.0 / opts.rate))
         - F.floor(uniform(seed, src, 5) * parse_duration(opts.disorder))
         - lateness_ms).cast("long").alias("event_ms"),
        F.pmod(src, F.lit(opts.vehicles)).alias("vehicle"),
    )


def _corrupted(good_col: Column) -> Column:
    """A malformed payload of the ``kind`` drawn for the row, made from its good payload ``good_col``.

    Corruptions are string edits of the good payload: five more to_json serialisers would grow
    this stage's generated code past HotSpot's 8000-byte JIT limit.
    """
    c = F.col

    def with_field(name: str, json_value: str) -> Column:
        return F.regexp_replace(good_col, f'"{name}":[^,}}]*', f'"{name}":{json_value}')

    return (
        F.when(c("kind") == 0, F.expr("substring(good, 1, int(length(good) / 2))"))
        .when(c("kind") == 1, F.regexp_replace(good_col, '"vehicle_id":"[^"]*",', ""))
        .when(c("kind") == 2, with_field("speed_kmh", "999.9"))
        .when(c("kind") == 3, with_field("lat", "123.456"))
        .when(c("kind") == 4, with_field("speed_kmh", '"fast"'))
        .when(c("kind") == 5, F.replace(good_col, c("event_time_text"), iso_time(c("event_ms") + 172_800_000)))
        .otherwise(F.concat(F.lit("#garbage "), c("src").cast("string")))
    )
