"""The incidents processor without a query: PySpark's TwsTester drives it batch by batch.

A plain per-ping reference of the same rules (written independently of the processor's
block-wise numpy code) is the yardstick: random pings, cut into random micro-batches and
shuffled within the watermark, must give exactly the reference's incidents.
"""

from __future__ import annotations

import math
import random

import pandas as pd
import pytest
from pyspark.sql.streaming.tws_tester import TwsTester

from speedlayer.pipelines.fleet.incidents import INITIAL_STATE_COLUMNS, OUTPUT_COLUMNS, IncidentProcessor, IncidentRules

RULES = IncidentRules(after_ms=10_000, timeout_ms=30_000)
LIMIT = 50.0


def pings(vehicle, rows):
    """rows: (second, speed[, lat, lon]) -> the processor's input frame."""
    data = []
    for row in rows:
        sec, speed = row[0], row[1]
        lat, lon = (row[2], row[3]) if len(row) > 2 else (52.5, 13.4 + sec * 1e-4)
        ms = round(sec * 1000)
        data.append({"vehicle_id": vehicle, "event_time": pd.Timestamp(ms, unit="ms"), "event_ms": ms,
                     "speed_kmh": float(speed), "speed_limit_kmh": LIMIT, "lat": lat, "lon": lon, "zone_id": "Z00"})
    return pd.DataFrame(data)


def make_tester(rules=RULES, **kwargs):
    return TwsTester(IncidentProcessor(rules), timeMode="EventTime", eventTimeExtractor=lambda r: int(r["event_ms"]), **kwargs)


def records(df):
    return [] if df.empty else df.to_dict("records")


def test_incident_opens_after_ten_seconds_and_closes_once_when_speed_drops():
    t = make_tester()
    assert t.testInPandas("V1", pings("V1", [(1, 60), (5, 70), (11, 65), (14, 40)])).empty  # waits for the watermark
    out = records(t.setWatermark(20_000))
    assert len(out) == 1
    inc = out[0]
    assert (inc["status"], inc["closed_by"], inc["pings"], inc["max_speed_kmh"], inc["max_excess_kmh"]) == \
        ("closed", "speed", 3, 70.0, 20.0)
    assert (inc["started_at"], inc["ended_at"], inc["closed_at"]) == \
        (pd.Timestamp(1000, unit="ms"), pd.Timestamp(11_000, unit="ms"), pd.Timestamp(14_000, unit="ms"))
    assert inc["duration_s"] == 10.0
    # two legs of 4e-4 and 6e-4 degrees of longitude at 52.5 N
    half_chord = math.cos(math.radians(52.5)) * math.sin(math.radians(1e-3) / 2)
    assert inc["distance_km"] == pytest.approx(2 * 6371.0088 * math.asin(half_chord), rel=1e-9)
    assert records(t.setWatermark(60_000)) == []  # never again, and the idle vehicle's state is gone
    assert t.peekValueState("group", "V1") is None


def test_shorter_run_is_no_incident():
    t = make_tester()
    t.testInPandas("V1", pings("V1", [(1, 60), (9, 70), (10, 40)]))
    assert records(t.setWatermark(100_000)) == []


def test_silent_vehicle_closes_by_timeout_timer():
    t = make_tester()
    t.testInPandas("V1", pings("V1", [(1, 60), (12, 60)]))
    assert records(t.setWatermark(41_000)) == []       # 12 s + 30 s not reached yet
    out = records(t.setWatermark(42_000))
    assert [(o["closed_by"], o["closed_at"]) for o in out] == [("timeout", pd.Timestamp(42_000, unit="ms"))]


def test_updates_while_open_then_closed():
    t = make_tester(IncidentRules(after_ms=10_000, timeout_ms=30_000, updates=True))
    t.testInPandas("V1", pings("V1", [(1, 60), (11, 60)]))
    opened = records(t.setWatermark(11_000))
    assert [(o["status"], o["pings"]) for o in opened] == [("open", 2)]
    t.testInPandas("V1", pings("V1", [(15, 61)]))
    assert [(o["status"], o["pings"]) for o in records(t.setWatermark(15_000))] == [("open", 3)]
    assert records(t.setWatermark(16_000)) == []  # nothing changed, nothing sent
    t.testInPandas("V1", pings("V1", [(18, 10)]))
    assert [(o["status"], o["closed_by"], o["pings"]) for o in records(t.setWatermark(18_000))] == [("closed", "speed", 3)]


def test_initial_state_resumes_an_open_incident():
    initial = pd.DataFrame([{
        "vehicle_id": "V7", "started_at": pd.Timestamp(0, unit="ms"), "ended_at": pd.Timestamp(20_000, unit="ms"),
        "zone_id": "Z03", "max_speed_kmh": 130.0, "max_excess_kmh": 30.0, "distance_km": 0.7, "pings": 8,
        "last_lat": 52.5, "last_lon": 13.4,
    }])[list(INITIAL_STATE_COLUMNS)]
    t = make_tester(initialStatePandas=[("V7", initial)])
    t.testInPandas("V7", pings("V7", [(25, 90, 52.5, 13.4), (30, 20, 52.5, 13.41)]))
    out = records(t.setWatermark(31_000))
    assert [(o["started_at"], o["pings"], o["max_speed_kmh"], o["zone_id"], o["closed_by"]) for o in out] == \
        [(pd.Timestamp(0, unit="ms"), 9, 130.0, "Z03", "speed")]
    assert out[0]["distance_km"] == pytest.approx(0.7)  # the leg to the closing ping is not inside the incident


# --- the yardstick: a plain per-ping reference of the same rules -------------------------------------

def haversine(a, b):
    p1, p2 = math.radians(a[0]), math.radians(b[0])
    h = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(b[1] - a[1]) / 2) ** 2
    return 2 * 6371.0088 * math.asin(math.sqrt(h))


def reference(vehicle, rows, rules):
    """rows: (ms, speed, lat, lon); the end of input closes an open incident (as a timeout)."""
    out, run, last = [], None, None

    def emit(by, at):
        out.append((vehicle, run["start"], run["last"], by, at, run["pings"], run["max"], round(run["km"], 9)))

    for ms, speed, lat, lon in sorted(rows):
        if last is not None and ms - last[0] > rules.timeout_ms:
            if run and run["open"]:
                emit("timeout", last[0] + rules.timeout_ms)
            run, last = None, None
        if speed > LIMIT:
            if run is None:
                run = {"start": ms, "km": 0.0, "pings": 0, "max": speed}
            else:
                run["km"] += haversine(last[1:], (lat, lon))
            run.update(last=ms, pings=run["pings"] + 1, max=max(run["max"], speed))
            run["open"] = ms - run["start"] >= rules.after_ms
        elif run is not None:
            if run["open"]:
                emit("speed", ms)
            run = None
        last = (ms, lat, lon)
    if run and run["open"]:
        emit("timeout", last[0] + rules.timeout_ms)
    return out


def as_tuples(frame):
    return [(r["vehicle_id"], r["started_at"].value // 10**6, r["ended_at"].value // 10**6, r["closed_by"],
             r["closed_at"].value // 10**6, r["pings"], r["max_speed_kmh"], round(r["distance_km"], 9))
            for r in records(frame)]


def random_drive(rng, vehicle, n):
    ms, rows, over = 0, [], False
    for _ in range(n):
        ms += rng.choice([500, 1000, 2000, 4000]) if rng.random() > 0.03 else rng.randint(31_000, 60_000)
        if rng.random() < 0.15:
            over = not over
        rows.append((ms, round(rng.uniform(55, 90) if over else rng.uniform(10, 50), 1),
                     round(52.5 + rng.uniform(-0.01, 0.01), 6), round(13.4 + rng.uniform(-0.01, 0.01), 6)))
    return rows


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("grouped", [False, True], ids=["key-per-vehicle", "vehicles-in-one-group"])
def test_micro_batches_out_of_order_equal_the_reference(seed, grouped):
    """With ``grouped`` every vehicle's pings come under one key, as a group of vehicles does in a query."""
    rng = random.Random(seed)
    rules = IncidentRules(after_ms=rng.choice([3000, 10_000]), timeout_ms=30_000)
    drives = {f"V{i}": random_drive(rng, f"V{i}", 100) for i in range(3)}
    delay_ms = 5000
    # arrival order: event time plus up to 4 s of disorder (less than the watermark delay: nothing late)
    arrivals = sorted(((ms + rng.randint(0, 4000), v, (ms, s, la, lo)) for v, rows in drives.items()
                       for ms, s, la, lo in rows), key=lambda a: a[0])
    t, got, watermark, i = make_tester(rules), [], 0, 0
    while i < len(arrivals):
        batch = arrivals[i:i + rng.randint(1, 25)]
        i += len(batch)
        frames = {v: pings(v, [(ms / 1000, s, la, lo) for _, w, (ms, s, la, lo) in batch if w == v])
                  for v in sorted({v for _, v, _ in batch})}
        if grouped:
            got += as_tuples(t.testInPandas("G", pd.concat(frames.values(), ignore_index=True).sample(frac=1, random_state=seed)))
        else:
            for vehicle, frame in frames.items():
                got += as_tuples(t.testInPandas(vehicle, frame))
        newest = max(r[0] for _, _, r in arrivals[:i])
        if newest - delay_ms > watermark:
            watermark = newest - delay_ms
            got += as_tuples(t.setWatermark(watermark))
    got += as_tuples(t.setWatermark(watermark + 10**9))  # the stream ends: every vehicle falls silent
    expected = [inc for v, rows in drives.items() for inc in reference(v, rows, rules)]
    assert len(expected) >= 3
    assert sorted(got) == sorted(expected)


def test_batch_mode_equals_the_reference():
    rng = random.Random(99)
    drives = {v: random_drive(rng, v, 200) for v in ("V1", "V2")}
    t = TwsTester(IncidentProcessor(RULES, batch=True), timeMode="EventTime", eventTimeExtractor=lambda r: int(r["event_ms"]))
    frame = pd.concat([pings(v, [(ms / 1000, s, la, lo) for ms, s, la, lo in rows]) for v, rows in drives.items()])
    got = as_tuples(t.testInPandas("G", frame.sample(frac=1, random_state=1)))
    expected = [inc for v, rows in drives.items() for inc in reference(v, rows, RULES)]
    assert sorted(got) == sorted(expected) and {g[0] for g in got} == {"V1", "V2"}


def test_output_columns_are_the_incident_schema():
    t = make_tester()
    t.testInPandas("V1", pings("V1", [(1, 60), (12, 60), (13, 10)]))
    assert list(t.setWatermark(14_000).columns) == list(OUTPUT_COLUMNS)
