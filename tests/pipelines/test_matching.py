"""Ride matching on small static DataFrames: near in space and time, whatever the cell borders."""

import random
from datetime import datetime, timedelta

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from speedlayer.pipelines.base import Params
from speedlayer.pipelines.fleet.geo import haversine_km
from speedlayer.pipelines.fleet.matching import ride_matches
from speedlayer.pipelines.fleet.options import FleetOptions
from speedlayer.pipelines.fleet.schemas import RIDE_REQUEST, VEHICLE_EVENT

T0 = datetime(2026, 11, 22, 10, 0, 0)
PICKUP = (52.5244, 13.4050)  # 45 m south of a row border of the 500 m grid (52.52481)


def pings(spark, rows):
    data = [(f"e{i}", vid, T0 + timedelta(seconds=sec), 30.0, lat, lon, T0 + timedelta(seconds=sec))
            for i, (vid, sec, lat, lon) in enumerate(rows)]
    return spark.createDataFrame(data, VEHICLE_EVENT.spark_type())


def requests(spark, rows):
    data = [(rid, rider, lat, lon, T0 + timedelta(seconds=sec), T0 + timedelta(seconds=sec))
            for rid, rider, sec, lat, lon in rows]
    return spark.createDataFrame(data, RIDE_REQUEST.spark_type())


def test_pings_near_the_pickup_and_the_request_time_are_candidates(spark):
    lat, lon = PICKUP
    result = ride_matches(pings(spark, [
        ("V1", 15, lat + 0.002, lon),        # 5 s before, 222 m north: a candidate
        ("V1", 9, lat, lon),                 # 11 s before: too early
        ("V2", 30, lat - 0.004, lon),        # 10 s after (the bound itself), 445 m south: a candidate
        ("V3", 21, lat + 0.0046, lon),       # 511 m away, in the row of cells next to the pickup's: too far
        ("V4", 20, lat + 0.0006, lon),       # 67 m away but across the cell border: a candidate
        ("V5", 20, 52.60, 13.10),            # elsewhere
    ]), requests(spark, [
        ("r1", "R1", 20, lat, lon),
        ("r1", "R1", 20, lat, lon),          # re-sent: matched once
    ]), Params())
    rows = sorted(result.collect(), key=lambda r: r.vehicle_id)
    assert [(r.request_id, r.vehicle_id, (r.ping_time - T0).seconds) for r in rows] == [
        ("r1", "V1", 15), ("r1", "V2", 30), ("r1", "V4", 20)]
    assert [r.distance_m for r in rows] == pytest.approx([222.4, 444.8, 66.7], abs=0.2)
    assert {r.pickup_cell for r in rows} == {"11680:1813"}
    assert result.columns == ["request_id", "rider_id", "request_time", "pickup_cell", "vehicle_id", "ping_time",
                              "distance_m"]


def test_the_grid_finds_exactly_the_pairs_within_the_distance_and_time(spark):
    """Against a brute-force cross join: random points, a small grid, so many pairs straddle cell borders."""
    rnd = random.Random(5)

    def spot():
        return 52.5 + rnd.uniform(0, 0.02), 13.4 + rnd.uniform(0, 0.03)

    ping_df = pings(spark, [(f"V{i % 40}", rnd.uniform(0, 60), *spot()) for i in range(400)])
    request_df = requests(spark, [(f"r{i}", f"R{i}", rnd.uniform(0, 60), *spot()) for i in range(40)])
    params = Params(options=FleetOptions(match_cell=150.0, match_within="4s"))
    result = ride_matches(ping_df, request_df, params)

    p, r = ping_df.alias("p"), request_df.alias("r")
    distance_m = haversine_km(F.col("r.pickup_lat"), F.col("r.pickup_lon"), F.col("p.lat"), F.col("p.lon")) * 1000
    gap_s = F.abs(F.col("p.event_time").cast("double") - F.col("r.request_time").cast("double"))
    brute = (p.crossJoin(r).where((distance_m <= 150.0) & (gap_s <= 4.0))
             .select("r.request_id", "p.vehicle_id", F.col("p.event_time").alias("ping_time")))
    assert brute.count() > 20
    assertDataFrameEqual(result.select("request_id", "vehicle_id", "ping_time"), brute)
