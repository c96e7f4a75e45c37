"""The late-events processor under TwsTester: rows behind the previous batch's watermark, kept."""

import pandas as pd
import pytest
from pyspark.sql.streaming.tws_tester import TwsTester

from speedlayer.core.errors import ConfigError
from speedlayer.core.schemas import EventSchema, Field
from speedlayer.pipelines.app_actions import APP_ACTION
from speedlayer.pipelines.fleet.schemas import VEHICLE_EVENT
from speedlayer.state.late import LateProcessor, late_schema

LATE_SCHEMA = late_schema(VEHICLE_EVENT)


def events(*rows):
    return pd.DataFrame([{"_all": 0, "event_id": eid, "vehicle_id": "V1", "event_ms": ms, "speed_kmh": 30.0,
                          "lat": 52.5, "lon": 13.4} for eid, ms in rows])


def make_tester():
    # No extractor-based filtering: the real input carries no watermark column (see speedlayer.state.late).
    return TwsTester(LateProcessor(VEHICLE_EVENT, "event_id", window_ms=10_000), timeMode="EventTime",
                     eventTimeExtractor=lambda r: 10**15)


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
    t = TwsTester(LateProcessor(VEHICLE_EVENT, "event_id", window_ms=10_000, lateness_ms=30_000), timeMode="EventTime",
                  eventTimeExtractor=lambda r: 10**15)
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


def test_the_fleets_late_rows_keep_their_columns_and_types():
    assert [(f.name, f.dataType.simpleString()) for f in LATE_SCHEMA.fields] == [
        ("event_id", "string"), ("vehicle_id", "string"), ("event_time", "timestamp"), ("speed_kmh", "double"),
        ("lat", "double"), ("lon", "double"), ("window_start", "timestamp"), ("window_end", "timestamp"),
        ("missed_watermark", "timestamp"), ("copies", "bigint")]


def test_any_schema_late_rows_are_its_fields_keyed_by_its_dedup_key():
    t = TwsTester(LateProcessor(APP_ACTION, "id", window_ms=300_000), timeMode="EventTime",
                  eventTimeExtractor=lambda r: 10**15)

    def actions(*rows):
        return pd.DataFrame([{"_all": 0, "id": i, "event_ms": ms, "action": a, "offset": o} for i, ms, a, o in rows])

    t.testInPandas(0, actions(("a", 900_000, "open", "f1:1")))
    t.setWatermark(600_000)
    out = t.testInPandas(0, actions(("x", 310_000, "view", "f2:3"), ("x", 310_000, "click", "f2:2"),
                                    ("y", 700_000, "view", "f2:4")))
    assert list(out.columns) == late_schema(APP_ACTION).fieldNames()
    assert [tuple(r) for r in out.itertuples(index=False)] == [
        ("x", pd.Timestamp(310_000, unit="ms"), "click", pd.Timestamp(300_000, unit="ms"),
         pd.Timestamp(600_000, unit="ms"), pd.Timestamp(600_000, unit="ms"), 2)]


def test_a_field_named_like_a_late_column_is_refused_with_the_fix():
    clashing = EventSchema("order", (Field("order_id", "string"), Field("at", "timestamp"), Field("copies", "long")),
                           time_field="at")
    with pytest.raises(ConfigError, match="field.s. copies, which the late output uses itself: rename"):
        late_schema(clashing)
    event_ms_as_time = EventSchema("tick", (Field("tick_id", "string"), Field("event_ms", "timestamp")), "event_ms")
    assert late_schema(event_ms_as_time).fieldNames()[:2] == ["tick_id", "event_ms"]


def test_a_composite_key_with_the_event_time_tells_apart_events_of_one_instant():
    reading = EventSchema("reading", (Field("device_id", "string"), Field("at", "timestamp"), Field("value", "double")),
                          time_field="at")
    t = TwsTester(LateProcessor(reading, ("device_id", "at"), window_ms=10_000), timeMode="EventTime",
                  eventTimeExtractor=lambda r: 10**15)

    def readings(*rows):
        return pd.DataFrame([{"_all": 0, "device_id": d, "event_ms": ms, "value": v, "offset": o} for d, ms, v, o in rows])

    t.testInPandas(0, readings(("D1", 30_000, 1.0, "f1:1")))
    t.setWatermark(25_000)
    out = t.testInPandas(0, readings(("D1", 20_000, 2.0, "f2:2"), ("D2", 20_000, 3.0, "f2:3"), ("D1", 20_000, 4.0, "f2:1"),
                                     ("D1", 21_000, 5.0, "f2:4")))
    assert list(out.columns) == late_schema(reading).fieldNames()
    assert sorted((r.device_id, r.at, r.value, r.copies) for r in out.itertuples()) == [
        ("D1", pd.Timestamp(20_000, unit="ms"), 4.0, 2), ("D1", pd.Timestamp(21_000, unit="ms"), 5.0, 1),
        ("D2", pd.Timestamp(20_000, unit="ms"), 3.0, 1)]
