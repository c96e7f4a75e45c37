"""The trips processor without a query: PySpark's TwsTester drives it batch by batch.

The yardstick is ``tests.oracle.trips``, plain Python over the pings (sorted, split on the gap and
the max-trip cut), written from the documented rules, not from the processor's numpy code.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pandas as pd
import pytest
from pyspark.sql.streaming.tws_tester import TwsTester

from speedlayer.pipelines.fleet.trip_track import TripRules
from speedlayer.pipelines.fleet.trips import OUTPUT_COLUMNS, TripProcessor
from tests import oracle

GAP, MAX_TRIP = timedelta(minutes=1), timedelta(minutes=10)
RULES = TripRules(gap_us=60_000_000, max_trip_us=600_000_000)
T0 = datetime(2026, 11, 22, 9, 55)  # 5 min before a 10-minute cut
US = timedelta(microseconds=1)


def micros(t: datetime) -> int:
    return (t - oracle.EPOCH) // US


def frame(pings: list[oracle.Ping]) -> pd.DataFrame:
    return pd.DataFrame([{"vehicle_id": p.vehicle_id, "event_time": pd.Timestamp(p.event_time), "event_us": micros(p.event_time),
                          "lat": p.lat, "lon": p.lon, "speed_kmh": p.speed_kmh} for p in pings])


def ping(vehicle: str, t: datetime, speed: float = 30.0, lat: float = 52.5, lon: float = 13.4) -> oracle.Ping:
    return oracle.Ping(f"{vehicle}@{t.isoformat()}", vehicle, t, speed, lat, lon)


def make_tester(batch: bool = False) -> TwsTester:
    # Spark's late filter drops a ping at or before the watermark (ms) * 1000 µs: ceil to ms says the same
    return TwsTester(TripProcessor(RULES, batch=batch), timeMode="EventTime",
                     eventTimeExtractor=lambda r: -(-int(r["event_us"]) // 1000))


def as_dict(df: pd.DataFrame) -> dict[tuple, dict]:
    rows = [] if df.empty else df.to_dict("records")
    return {(r["vehicle_id"], r["trip_start"].to_pydatetime()):
            {**{k: r[k] for k in OUTPUT_COLUMNS[3:]}, "trip_end": r["trip_end"].to_pydatetime()} for r in rows}


def assert_trips_equal(got: dict, expected: dict) -> None:
    assert sorted(got) == sorted(expected)
    for key, trip in expected.items():
        assert got[key] == {**trip, "distance_km": pytest.approx(trip["distance_km"], rel=1e-12, abs=1e-12),
                            "avg_speed_kmh": pytest.approx(trip["avg_speed_kmh"], rel=1e-12)}, key


def test_a_ping_exactly_the_gap_later_goes_on_the_trip_and_one_microsecond_more_starts_another():
    # Spark's session windows merge a ping at the last one plus the gap, exactly
    pings = [ping("V1", T0), ping("V1", T0 + GAP, lat=52.51), ping("V1", T0 + 2 * GAP + US, lat=52.52)]
    expected = oracle.trips(pings, GAP, MAX_TRIP)
    assert [(k[1], t["pings"]) for k, t in sorted(expected.items())] == [(T0, 2), (T0 + 2 * GAP + US, 1)]
    t = make_tester(batch=True)
    assert_trips_equal(as_dict(t.testInPandas("G", frame(pings))), expected)
    stream = make_tester()
    stream.testInPandas("G", frame(pings))
    assert_trips_equal(as_dict(stream.setWatermark(micros(T0) // 1000 + 10**9)), expected)


def test_a_trip_is_cut_at_the_max_trip_multiple_and_written_once_its_gap_has_passed():
    pings = [ping("V1", T0 + timedelta(seconds=20 * i), lat=52.5 + i * 1e-3) for i in range(30)]  # 9:55 to 10:04:40
    cut = datetime(2026, 11, 22, 10, 0)
    t = make_tester()
    t.testInPandas("G", frame(pings))
    last_before_cut_ms = micros(cut - timedelta(seconds=20)) // 1000
    assert t.setWatermark(last_before_cut_ms + 59_999).empty  # the cut alone does not end it: the gap has not passed
    first = as_dict(t.setWatermark(last_before_cut_ms + 60_000))
    assert [(k[1], v["trip_end"], v["pings"]) for k, v in first.items()] == [(T0, cut - timedelta(seconds=20), 15)]
    rest = as_dict(t.setWatermark(micros(T0) // 1000 + 10**9))
    assert_trips_equal({**first, **rest}, oracle.trips(pings, GAP, MAX_TRIP))
    assert t.peekValueState("group", "G") is None  # nothing kept once every trip is written


def random_drive(rng: random.Random, vehicle: str, n: int) -> list[oracle.Ping]:
    t, out = T0, []
    for _ in range(n):
        t += rng.choice([timedelta(seconds=s) for s in (1, 5, 20)] + [GAP, GAP + US, timedelta(minutes=3)])
        out.append(ping(vehicle, t, round(rng.uniform(0, 90), 1), round(52.5 + rng.uniform(-0.01, 0.01), 6),
                        round(13.4 + rng.uniform(-0.01, 0.01), 6)))
        if rng.random() < 0.05:  # another ping at the same time elsewhere: ordered by position
            out.append(ping(vehicle, t, 10.0, round(52.5 + rng.uniform(-0.01, 0.01), 6), 13.4))
    return out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("grouped", [False, True], ids=["key-per-vehicle", "vehicles-in-one-group"])
def test_micro_batches_out_of_order_equal_the_oracle(seed, grouped):
    """Pings arrive up to 4 s out of order (less than the 5 s watermark delay: none late), in random batches."""
    rng = random.Random(seed)
    pings = [p for v in ("V1", "V2", "V3") for p in random_drive(rng, v, 120)]
    arrivals = sorted(pings, key=lambda p: p.event_time + timedelta(milliseconds=rng.randint(0, 4000)))
    t, got, watermark_ms, i = make_tester(), {}, 0, 0
    while i < len(arrivals):
        batch = arrivals[i:i + rng.randint(1, 30)]
        i += len(batch)
        by_key = {"G": batch} if grouped else {v: [p for p in batch if p.vehicle_id == v] for v in {p.vehicle_id for p in batch}}
        for key, own in by_key.items():
            got.update(as_dict(t.testInPandas(key, frame(own).sample(frac=1, random_state=seed))))
        newest_ms = max(micros(p.event_time) for p in arrivals[:i]) // 1000
        if newest_ms - 5000 > watermark_ms:
            watermark_ms = newest_ms - 5000
            got.update(as_dict(t.setWatermark(watermark_ms)))
    got.update(as_dict(t.setWatermark(watermark_ms + 10**9)))  # the stream ends: every trip is final
    expected = oracle.trips(pings, GAP, MAX_TRIP)
    assert len(expected) > 20 and max(trip["pings"] for trip in expected.values()) > 10
    assert_trips_equal(got, expected)


def test_batch_mode_equals_the_oracle():
    rng = random.Random(99)
    pings = [p for v in ("V1", "V2") for p in random_drive(rng, v, 300)]
    got = as_dict(make_tester(batch=True).testInPandas("G", frame(pings).sample(frac=1, random_state=1)))
    assert_trips_equal(got, oracle.trips(pings, GAP, MAX_TRIP))


def test_the_state_stays_the_same_size_however_long_the_trip():
    """A ping a second for 500 s, 10 a batch, the watermark 5 s behind: one trip, its state never grows."""
    start = datetime(2026, 11, 22, 10, 0)  # the trip stays within one 10-minute cut
    t, sizes = make_tester(), []
    for b in range(50):
        t.testInPandas("G", frame([ping("V1", start + timedelta(seconds=10 * b + i), lat=52.5 + b * 1e-3) for i in range(10)]))
        t.setWatermark(micros(start) // 1000 + (10 * b + 9) * 1000 - 5000)
        trips, pending, _ = t.peekValueState("group", "G")
        sizes.append(len(trips) + len(pending))
    assert len(set(sizes[2:])) == 1, sizes
    out = as_dict(t.setWatermark(micros(start) // 1000 + 10**9))
    assert [v["pings"] for v in out.values()] == [500]
