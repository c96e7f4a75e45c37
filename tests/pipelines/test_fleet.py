"""The fleet pipeline on small static DataFrames: windows, sliding averages, alerts, dedup."""

from datetime import datetime, timedelta

import pytest
from pyspark.testing import assertDataFrameEqual

from speedlayer.pipelines.base import Params
from speedlayer.pipelines.fleet import fleet_pipeline
from speedlayer.pipelines.fleet.options import FleetOptions
from speedlayer.pipelines.fleet.schemas import VEHICLE_EVENT

T0 = datetime(2026, 11, 22, 10, 0, 0)
MITTE = (52.52, 13.40)   # zone Z01, limit 30
CITY = (52.60, 13.10)    # default zone Z00, limit 50


def events(spark, rows):
    data = [(eid, vid, T0 + timedelta(seconds=sec), speed, pos[0], pos[1], T0 + timedelta(seconds=sec))
            for eid, vid, sec, speed, pos in rows]
    return spark.createDataFrame(data, VEHICLE_EVENT.spark_type())


@pytest.fixture(scope="module")
def outputs(spark):
    df = events(spark, [
        ("e1", "V1", 1, 20.0, MITTE),
        ("e2", "V1", 4, 40.0, MITTE),      # over 30
        ("e2", "V1", 4, 40.0, MITTE),      # re-sent: counted once
        ("e3", "V1", 12, 60.0, CITY),      # over 50, next window
        ("e4", "V2", 3, 45.0, CITY),
    ])
    return fleet_pipeline(df, Params())


def test_tumbling_windows_per_vehicle(spark, outputs):
    expected = spark.createDataFrame([
        (T0, T0 + timedelta(seconds=10), "V1", 2, 30.0, 40.0, 1),
        (T0 + timedelta(seconds=10), T0 + timedelta(seconds=20), "V1", 1, 60.0, 60.0, 1),
        (T0, T0 + timedelta(seconds=10), "V2", 1, 45.0, 45.0, 0),
    ], "window_start timestamp, window_end timestamp, vehicle_id string, events long, avg_speed_kmh double, "
       "max_speed_kmh double, over_limit_events long")
    assertDataFrameEqual(outputs["windows"], expected)


def test_with_allowed_lateness_a_static_run_is_every_window_at_revision_0(spark, outputs):
    source = events(spark, [("e1", "V1", 1, 20.0, MITTE), ("e2", "V1", 4, 40.0, MITTE), ("e2", "V1", 4, 40.0, MITTE),
                            ("e3", "V1", 12, 60.0, CITY), ("e4", "V2", 3, 45.0, CITY)])
    corrected = fleet_pipeline(source, Params(options=FleetOptions(allowed_lateness="30s")))["windows"]
    assert corrected.columns == outputs["windows"].columns + ["revision"]
    assertDataFrameEqual(corrected.drop("revision"), outputs["windows"])
    assert {r.revision for r in corrected.collect()} == {0}


def test_alerts_name_the_zone_and_the_excess(outputs):
    alerts = sorted((a.event_id, a.zone_id, a.speed_limit_kmh, a.excess_kmh) for a in outputs["alerts"].collect())
    assert alerts == [("e2", "Z01", 30.0, 10.0), ("e3", "Z00", 50.0, 10.0)]


def test_sliding_windows_cover_each_event_six_times(outputs):
    rows = outputs["sliding"].where("vehicle_id = 'V2'").collect()
    assert len(rows) == 6  # 1 min windows every 10 s
    assert {r.events for r in rows} == {1}


def test_window_and_slide_are_parameters(spark):
    df = events(spark, [("a", "V1", 1, 10.0, CITY), ("b", "V1", 25, 30.0, CITY)])
    out = fleet_pipeline(df, Params(window_ms=30_000, sliding_window_ms=20_000, slide_ms=20_000))
    assert [(r.events, r.avg_speed_kmh) for r in out["windows"].collect()] == [(2, 20.0)]
    assert sorted(r.events for r in out["sliding"].collect()) == [1, 1]
