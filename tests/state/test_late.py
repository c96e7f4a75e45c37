"""The late-events processor under TwsTester: rows behind the previous batch's watermark, kept."""

import pandas as pd
from pyspark.sql.streaming.tws_tester import TwsTester

from speedlayer.state.late import LATE_SCHEMA, LateProcessor


def events(*rows):
    return pd.DataFrame([{"_all": 0, "event_id": eid, "vehicle_id": "V1", "event_ms": ms, "speed_kmh": 30.0,
                          "lat": 52.5, "lon": 13.4} for eid, ms in rows])


def make_tester():
    # No extractor-based filtering: the real input carries no watermark column (see speedlayer.state.late).
    return TwsTester(LateProcessor(window_ms=10_000), timeMode="EventTime", eventTimeExtractor=lambda r: 10**15)


def test_rows_behind_the_previous_batchs_watermark_are_late_with_their_window():
    t = make_tester()
    assert t.testInPandas(0, events(("a", 1_000), ("b", 20_000))).empty  # first batch: no watermark yet
    t.setWatermark(15_000)   # the watermark moves: the timer stores it
    out = t.testInPandas(0, events(("c", 12_000), ("c", 12_000), ("d", 16_000), ("e", 15_000)))
    assert list(out.columns) == LATE_SCHEMA.fieldNames()
    got = sorted((r.event_id, r.copies, r.window_start, r.missed_watermark) for r in out.itertuples())
    assert got == [("c", 2, pd.Timestamp(10_000, unit="ms"), pd.Timestamp(15_000, unit="ms")),
                   ("e", 1, pd.Timestamp(10_000, unit="ms"), pd.Timestamp(15_000, unit="ms"))]


def test_a_watermark_moved_by_a_batch_without_data_is_seen_through_the_timer():
    t = make_tester()
    t.testInPandas(0, events(("a", 30_000)))
    t.setWatermark(25_000)  # a batch without data moves the watermark: only the timer wakes the processor
    assert sorted(t.testInPandas(0, events(("b", 20_000), ("c", 26_000)))["event_id"]) == ["b"]


def test_with_allowed_lateness_only_rows_behind_the_watermark_minus_the_lateness_are_late():
    t = TwsTester(LateProcessor(window_ms=10_000, lateness_ms=30_000), timeMode="EventTime", eventTimeExtractor=lambda r: 10**15)
    t.testInPandas(0, events(("a", 60_000)))
    t.setWatermark(55_000)
    out = t.testInPandas(0, events(("b", 25_001), ("c", 25_000), ("d", 40_000)))
    # b is under 30 s behind the watermark: within the lateness, the windows correct themselves with it
    assert [(r.event_id, r.missed_watermark) for r in out.itertuples()] == [("c", pd.Timestamp(55_000, unit="ms"))]


def test_of_differing_late_copies_the_lowest_offset_one_is_shown_whatever_their_order():
    for speeds in ([(95.0, "f3.jsonl:1"), (90.0, "f2.jsonl:2")], [(90.0, "f2.jsonl:2"), (95.0, "f3.jsonl:1")]):
        t = make_tester()
        t.testInPandas(0, events(("a", 30_000)))
        t.setWatermark(25_000)
        late = events(("x", 20_000), ("x", 20_000)).assign(speed_kmh=[s for s, _ in speeds], offset=[o for _, o in speeds])
        out = t.testInPandas(0, late)
        assert [(r.event_id, r.speed_kmh, r.copies) for r in out.itertuples()] == [("x", 90.0, 2)]
