"""Windows with allowed lateness under TwsTester: revision 0 at close, corrections, state dropped after the bound.

The tester's watermark is Spark's watermark of the windows query, which runs ``L`` behind the real
one (W' = W - L; see ``speedlayer.pipelines.fleet.lateness``). Window 10 s, lateness 30 s.
"""

import random

import pandas as pd
import pytest
from pyspark.sql.streaming.tws_tester import TwsTester

from speedlayer.pipelines.fleet.lateness import OUTPUT_COLUMNS, WindowsProcessor

WINDOW, LATENESS = 10_000, 30_000


def pings(*rows, vehicle="V1"):
    """rows: (second, speed); every zone limit is 50 km/h."""
    return pd.DataFrame([{"vehicle_id": vehicle, "event_ms": round(sec * 1000), "speed_kmh": float(speed),
                          "speed_limit_kmh": 50.0} for sec, speed in rows])


def make_tester():
    return TwsTester(WindowsProcessor(WINDOW, LATENESS), timeMode="EventTime", outputMode="Update",
                     eventTimeExtractor=lambda r: int(r["event_ms"]))


def rows(df):
    return [] if df.empty else [(r.window_start, r.events, r.avg_speed_kmh, r.max_speed_kmh, r.over_limit_events, r.revision)
                                for r in df.itertuples()]


def at(sec):
    return pd.Timestamp(sec * 1000, unit="ms")


def test_window_closes_as_revision_0_and_a_late_event_within_the_lateness_corrects_it():
    t = make_tester()
    assert t.testInPandas("V1", pings((101, 40), (105, 60))).empty        # [100 s, 110 s) still open
    out = t.setWatermark(110_000 - LATENESS)                               # real watermark 110 s: closed
    assert list(out.columns) == list(OUTPUT_COLUMNS)
    assert rows(out) == [(at(100), 2, 50.0, 60.0, 1, 0)]
    # an event 7 s behind the watermark: within the lateness, so the window is re-emitted corrected
    assert rows(t.testInPandas("V1", pings((103, 80)))) == [(at(100), 3, 60.0, 80.0, 2, 1)]
    assert rows(t.setWatermark(139_999 - LATENESS)) == []                 # nothing changed, nothing sent
    assert t.peekListState("windows", "V1")                                # kept until end + lateness
    assert rows(t.setWatermark(140_000 - LATENESS)) == []                 # real watermark 140 s = end + lateness
    assert not t.peekListState("windows", "V1")                            # dropped: later events are the late output's


def test_first_event_of_an_already_closed_window_is_revision_0_at_once():
    t = make_tester()
    t.setWatermark(120_000 - LATENESS)
    assert rows(t.testInPandas("V1", pings((105, 30), (125, 30)))) == [(at(100), 1, 30.0, 30.0, 0, 0)]
    assert rows(t.testInPandas("V1", pings((101, 70)))) == [(at(100), 2, 50.0, 70.0, 1, 1)]


def test_corrections_end_with_the_values_of_every_accepted_event():
    """Random arrival order: the last revision of each window equals a plain aggregate of the events the
    windows took, and revisions count 0, 1, ... (The tester sets the watermark, firing timers, before a
    batch's rows and filters rows at or before it; Spark filters at the previous batch's, after the rows.)"""
    rng = random.Random(7)
    events = [(rng.uniform(0, 300), rng.uniform(20, 90)) for _ in range(400)]
    rng.shuffle(events)
    t, emitted, accepted = make_tester(), [], []
    newest, previous_wm = 0.0, 0
    for i in range(0, len(events), 20):
        watermark = max(previous_wm, round(newest * 1000) - 5_000 - LATENESS)     # W' of this batch
        emitted += rows(t.setWatermark(watermark)) if watermark > previous_wm else []
        batch = [e for e in events[i:i + 20] if round(e[0] * 1000) > watermark]   # the tester's late filter
        accepted += batch
        emitted += rows(t.testInPandas("V1", pings(*batch)))
        newest = max([newest] + [e[0] for e in events[i:i + 20]])
        previous_wm = watermark
    emitted += rows(t.setWatermark(10**9))
    last = {}
    for start, n, avg, top, over, revision in emitted:
        assert revision == (last[start][-1] + 1 if start in last else 0)
        last[start] = (n, avg, top, over, revision)
    expected = pd.DataFrame(accepted, columns=["sec", "speed"])
    expected = expected.assign(start=lambda d: (d.sec * 1000).round().astype(int) // WINDOW * WINDOW)
    expected = expected.groupby("start").agg(n=("speed", "size"), avg=("speed", "mean"), top=("speed", "max"),
                                             over=("speed", lambda s: int((s > 50).sum())))
    assert sorted(last) == [at(s / 1000) for s in expected.index]
    for start, row in expected.iterrows():
        n, avg, top, over, _ = last[at(start / 1000)]
        assert (n, top, over) == (row.n, row.top, row.over) and avg == pytest.approx(row.avg)
    assert any(v[-1] > 0 for v in last.values())  # some windows were corrected
