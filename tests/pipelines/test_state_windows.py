"""Trips, zone congestion and count windows on small static DataFrames; the count-window state step alone."""

import math
from datetime import datetime, timedelta

import pandas as pd
import pytest
from pyspark.testing import assertDataFrameEqual

from speedlayer.pipelines.base import Params
from speedlayer.pipelines.fleet import fleet_pipeline
from speedlayer.pipelines.fleet.count_windows import CountWindowState
from speedlayer.pipelines.fleet.options import FleetOptions
from tests.pipelines.test_fleet import CITY, MITTE, T0, events


def haversine(a, b):
    la1, lo1, la2, lo2 = map(math.radians, (*a, *b))
    h = math.sin((la2 - la1) / 2) ** 2 + math.cos(la1) * math.cos(la2) * math.sin((lo2 - lo1) / 2) ** 2
    return 2 * 6371.0088 * math.asin(math.sqrt(h))


P1, P2, P3 = (52.52, 13.40), (52.53, 13.41), (52.53, 13.43)


@pytest.fixture(scope="module")
def outputs(spark):
    df = events(spark, [
        # V1: a trip of three pings given out of order (plus a re-sent one), a 6 min pause, a one-ping trip
        ("a3", "V1", 20, 50.0, P3), ("a1", "V1", 0, 10.0, P1), ("a2", "V1", 10, 30.0, P2), ("a2", "V1", 10, 30.0, P2),
        ("a4", "V1", 380, 20.0, CITY),
        ("b1", "V2", 5, 40.0, MITTE), ("b2", "V2", 65, 20.0, MITTE),
    ])
    return fleet_pipeline(df, Params(options=FleetOptions(count_window=2)))


def test_trips_split_on_the_gap_and_measure_the_path(outputs):
    rows = {(r.vehicle_id, r.trip_start): r for r in outputs["trips"].collect()}
    first = rows[("V1", T0)]
    assert (first.trip_end, first.duration_s, first.pings) == (T0 + timedelta(seconds=20), 20.0, 3)
    assert first.distance_km == pytest.approx(haversine(P1, P2) + haversine(P2, P3), rel=1e-12)
    assert (first.avg_speed_kmh, first.max_speed_kmh) == (30.0, 50.0)
    lone = rows[("V1", T0 + timedelta(seconds=380))]
    assert (lone.pings, lone.distance_km, lone.duration_s) == (1, 0.0, 0.0)
    assert rows[("V2", T0 + timedelta(seconds=5))].pings == 2  # 60 s apart: within the 5 min gap
    assert len(rows) == 3


def expected_trips(pings: list[datetime], gap: timedelta, cut: timedelta) -> list[tuple[datetime, datetime, int]]:
    """(start, end, pings) of each trip, computed the plain way: a new trip after a pause longer than
    ``gap``, or when a ping falls into another multiple of ``cut`` since the epoch."""
    epoch, trips = datetime(1970, 1, 1), []
    for t in sorted(pings):
        if trips and t - trips[-1][1] <= gap and (t - epoch) // cut == (trips[-1][0] - epoch) // cut:
            trips[-1] = (trips[-1][0], t, trips[-1][2] + 1)
        else:
            trips.append((t, t, 1))
    return trips


def test_a_vehicle_that_never_stops_still_ends_its_trips_at_the_max_trip_length(spark):
    # 2.5 h of pings every 20 s with no pause: without a cap this is one trip held open for good
    pings = [(f"e{i}", "V1", 600 + 20 * i, 30.0, MITTE) for i in range(450)]
    got = fleet_pipeline(events(spark, pings), Params())["trips"].select("trip_start", "trip_end", "pings")
    expected = expected_trips([T0 + timedelta(seconds=s) for _, _, s, _, _ in pings],
                              timedelta(minutes=5), timedelta(hours=1))
    assert len(expected) == 3 and max(end - start for start, end, _ in expected) < timedelta(hours=1)
    assertDataFrameEqual(got, spark.createDataFrame(expected, "trip_start timestamp, trip_end timestamp, pings long"))


def test_congestion_averages_each_zone_per_minute(spark, outputs):
    m = lambda k: T0 + timedelta(minutes=k)  # noqa: E731
    z01, z02 = ("Z01", "Mitte school streets", 30.0), ("Z02", "Prenzlauer Berg", 30.0)
    expected = spark.createDataFrame([
        (m(0), m(1), *z01, 2, 25.0, 25.0 / 30),   # a1 (P1) and b1
        (m(0), m(1), *z02, 2, 40.0, 40.0 / 30),   # a2, a3 (P2, P3); the re-sent a2 counted once
        (m(1), m(2), *z01, 1, 20.0, 20.0 / 30),
        (m(6), m(7), "Z00", "City default", 50.0, 1, 20.0, 0.4),
    ], "window_start timestamp, window_end timestamp, zone_id string, zone_name string, speed_limit_kmh double, "
       "events long, avg_speed_kmh double, limit_ratio double")
    assertDataFrameEqual(outputs["congestion"], expected)


def test_count_windows_number_full_windows_by_event_time(outputs):
    rows = sorted((r.vehicle_id, r.window_index, r.window_start, r.window_end, r.pings, r.avg_speed_kmh)
                  for r in outputs["count-windows"].collect())
    assert rows == [
        ("V1", 0, T0, T0 + timedelta(seconds=10), 2, 20.0),
        ("V1", 1, T0 + timedelta(seconds=20), T0 + timedelta(seconds=380), 2, 35.0),
        ("V2", 0, T0 + timedelta(seconds=5), T0 + timedelta(seconds=65), 2, 30.0),
    ]


class FakeState:
    """The part of GroupState the count-window step uses."""

    def __init__(self):
        self.value, self.timeout, self.watermark = None, None, 0

    exists = property(lambda self: self.value is not None)
    get = property(lambda self: self.value)

    def update(self, value):
        self.value = value

    def getCurrentWatermarkMs(self):
        return self.watermark

    def setTimeoutTimestamp(self, ms):
        assert ms >= self.watermark
        self.timeout = ms


def pings(*specs):
    return pd.DataFrame({"vehicle_id": "V1", "event_time": [T0 + timedelta(milliseconds=ms) for ms, _, _ in specs],
                         "event_id": [i for _, i, _ in specs], "speed_kmh": [s for _, _, s in specs]})


def run_step(step, state, watermark_ms, *frames):
    state.watermark = watermark_ms
    out = list(step(("V1",), iter(frames), state))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def test_count_window_state_emits_once_pings_are_behind_the_watermark():
    step, state = CountWindowState(3), FakeState()
    t0 = int(pd.Timestamp(T0).value // 1_000_000)
    # batch 1: four pings, out of order, none final yet
    assert run_step(step, state, t0, pings((300, "c", 30.0), (100, "a", 10.0), (200, "b", 20.0), (400, "d", 40.0))).empty
    assert state.timeout == t0 + 300 - 1  # fires once the watermark reaches the third ping
    # a later batch brings an earlier ping (still ahead of the watermark) and moves the watermark past 300 ms
    out = run_step(step, state, t0 + 350, pings((150, "a2", 15.0)))
    assert out[["window_index", "pings", "avg_speed_kmh"]].values.tolist() == [[0, 3, 15.0]]
    assert (out["window_start"][0], out["window_end"][0]) == (pd.Timestamp(T0) + pd.Timedelta(milliseconds=100),
                                                              pd.Timestamp(T0) + pd.Timedelta(milliseconds=200))
    # a ping before the last one emitted is late and dropped; 300, 400, 500 wait for the watermark
    assert run_step(step, state, t0 + 450, pings((150, "a1", 99.0), (500, "e", 50.0))).empty
    assert state.timeout == t0 + 499
    # the timeout call (no data) emits the window once the watermark has passed its last ping
    out = run_step(step, state, t0 + 5000)
    assert out[["window_index", "avg_speed_kmh"]].values.tolist() == [[1, 40.0]]
    assert state.value[1:] == (2, (t0 + 500) * 1000, "e")
