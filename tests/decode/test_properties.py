"""Properties of decoding, on nasty inputs: every row is a typed event or a dead letter with a reason.

Never both, never neither (blank text lines aside, which are ignored by design), nothing null where a
value is required, and no accepted time that a state processor (pandas) could not hold. Each
example is a list of rows decoded in one DataFrame, so a property costs a few Spark jobs, not one
per row. Every row gets its own ingest time, which the typed events carry: that is how an event is
traced back to its input row.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speedlayer.core.schemas import RAW_SCHEMA, EventSchema, Field
from speedlayer.decode.text import TEXT_LINE, decode_lines
from speedlayer.decode.validate import decode
from speedlayer.pipelines.app_actions import APP_ACTION
from speedlayer.pipelines.fleet.schemas import VEHICLE_EVENT

INGEST = datetime(2026, 11, 22, 10, 0, 5)
EPOCH = datetime(1970, 1, 1)
# no reset clock (1970, 1980, 1999) and nothing pandas cannot hold (1677-09-21 .. 2262-04-11)
EARLIEST, LATEST = datetime(2000, 1, 1), datetime(2262, 1, 1)
PROPERTY = settings(max_examples=10, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --- nasty values ---------------------------------------------------------------------------------

numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**30), 10**30),
                    st.sampled_from([0, -0.0, 1e308, -1e308, 5e-324, 400, 400.0000001, -90, 90.0, 180, 2**63, -(2**63) - 1]))
times = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)).map(lambda t: t.isoformat() + "Z"),
    st.integers(-(10**16), 10**16).map(lambda ms: ms),                    # epoch milliseconds, from year -300000 on
    st.integers(-5000, 5000).map(lambda ms: (INGEST + timedelta(milliseconds=ms)).isoformat() + "Z"),  # near ingest
    st.sampled_from(["0001-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "1980-01-06T00:00:00Z", "2000-01-01T00:00:00Z",
                     "2262-04-11T23:47:16Z", "9999-12-31T23:59:59Z", "2026-02-30T10:00:00Z", "2026-11-22T10:00:05+14:00",
                     "1795341605000", "-62135596800000", "", " ", "NaN", "yesterday", "+294247-01-10T04:00:54Z"]),
    st.sampled_from([10**16, 2**63 - 1, -(2**63), 9_223_372_036_854_775, 9_223_372_036_854_776]),  # past Spark's timestamps
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=12), times)
any_json = st.recursive(scalars,
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                        max_leaves=6)
GOOD_VALUES = {"event_id": "e-1", "vehicle_id": "V1", "speed_kmh": 50.0, "lat": 52.5, "lon": 13.4, "id": "a-1", "action": "open",
               "order_id": "o-1", "amount": 10.0, "coupon": "A", "gift": True, "items": 3}
#: a job file's kind of schema: optional fields, a boolean, one-sided bounds
SHOP_ORDER = EventSchema(
    name="shop order",
    fields=(Field("order_id", "string"), Field("amount", "double", min=0),
            Field("coupon", "string", choices=("A", "B"), required=False), Field("gift", "boolean", required=False),
            Field("items", "long", max=99, required=False), Field("order_time", "timestamp")),
    time_field="order_time",
)


@st.composite
def objects(draw, schema: EventSchema):
    """A good JSON object of the schema with up to two fields spoiled (nasty, missing or null), some extra fields."""
    obj = {f.name: (INGEST - timedelta(seconds=1)).isoformat() + "Z" if f.kind == "timestamp" else GOOD_VALUES[f.name]
           for f in schema.fields}
    for f in draw(st.sets(st.sampled_from(schema.fields), max_size=2)):
        spoil = draw(st.sampled_from(["nasty", "nasty", "missing", "null"]))
        if spoil == "nasty":
            obj[f.name] = draw(times if f.kind == "timestamp" else any_json)
        elif spoil == "missing":
            del obj[f.name]
        else:
            obj[f.name] = None
    obj.update(draw(st.dictionaries(st.text(max_size=6), any_json, max_size=2)))
    return obj


def to_json(value) -> str:
    # Python writes NaN and Infinity as bare words, which is not JSON: nasty too
    return json.dumps(value, allow_nan=True)


def payloads(schema: EventSchema):
    return st.one_of(objects(schema).map(to_json), objects(schema).map(to_json), any_json.map(to_json),
                     st.text(max_size=40), st.none())


ingest_kinds = st.sampled_from(["now", "now", "now", "now", "none", "year 1", "year 9999", "1970"])


def ingest_times(kinds: list[str]) -> list[datetime | None]:
    """A distinct ingest time per row (None for "none"): the events carry it back to their row."""
    base = {"now": INGEST, "year 1": datetime(1, 1, 2), "year 9999": datetime(9999, 12, 30), "1970": EPOCH}
    return [None if k == "none" else base[k] + timedelta(microseconds=i) for i, k in enumerate(kinds)]


def split(decoded, rows):
    """Each input row's events and dead letters."""
    events = decoded.events.collect()
    letters = decoded.dead_letters.collect()
    by_ingest = {}
    for e in events:
        assert e.ingest_time is not None and e.ingest_time not in by_ingest, e
        by_ingest[e.ingest_time] = e
    by_offset = {}
    for d in letters:
        assert d.offset not in by_offset, d
        by_offset[d.offset] = d
    assert len(by_ingest) + len(by_offset) <= len(rows)
    return [(by_ingest.get(at) if at is not None else None, by_offset.get(offset)) for _, _, offset, at in rows]


def assert_a_good_time(event_time, ingest_time, schema: EventSchema):
    assert event_time is not None and EARLIEST <= event_time < LATEST
    assert event_time <= ingest_time + timedelta(milliseconds=schema.ahead_ms)


def assert_a_typed_event(event, schema: EventSchema):
    for f in schema.fields:
        value = event[f.name]
        if value is None and not f.required:
            continue
        assert value is not None, (f.name, event)
        if f.kind == "string":
            assert value.strip(" ") != "", (f.name, event)
        if f.kind == "double":
            assert math.isfinite(value), (f.name, event)
        if f.kind in ("double", "long"):
            assert (f.min is None or f.min <= value) and (f.max is None or value <= f.max), (f.name, event)
        if f.kind == "boolean":
            assert isinstance(value, bool), (f.name, event)
        if f.choices:
            assert value in f.choices
    assert_a_good_time(event[schema.time_field], event.ingest_time, schema)


@pytest.mark.parametrize("schema", [VEHICLE_EVENT, APP_ACTION, SHOP_ORDER], ids=lambda s: s.name)
def test_every_json_payload_is_one_typed_event_or_one_dead_letter_with_a_reason(spark, schema):
    @PROPERTY
    @given(st.lists(st.tuples(payloads(schema), ingest_kinds), min_size=1, max_size=40))
    def check(drawn):
        rows = [(p, None, str(i), at) for i, ((p, _), at) in enumerate(zip(drawn, ingest_times([k for _, k in drawn])))]
        decoded = decode(spark.createDataFrame(rows, RAW_SCHEMA), schema)
        for (payload, _, _, at), (event, letter) in zip(rows, split(decoded, rows)):
            assert (event is None) != (letter is None), (payload, at, event, letter)
            if event is not None:
                assert_a_typed_event(event, schema)
            else:
                assert letter.reason and (letter.payload, letter.ingest_time) == (payload, at), letter

    check()


LEADING = st.one_of(times.map(str), st.sampled_from(["2026-11-22T10:00:04Z", "2026-11-22 10:00:04.5", "2026-11-22T10:00:09+00:00",
                                                      "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "2026-13-40T10:00:00Z"]))
lines = st.one_of(st.text(max_size=30), st.tuples(LEADING, st.sampled_from([" ", "\t", "  "]), st.text(max_size=20)).map("".join),
                  st.sampled_from(["", "   ", "\x00\x01", "caf\ufffd", "to be or not to be"]), st.none())


def test_every_text_line_is_one_event_or_one_dead_letter_with_a_reason(spark):
    @PROPERTY
    @given(st.lists(st.tuples(lines, ingest_kinds), min_size=1, max_size=40))
    def check(drawn):
        rows = [(p, None, str(i), at) for i, ((p, _), at) in enumerate(zip(drawn, ingest_times([k for _, k in drawn])))]
        for (line, _, _, at), (event, letter) in zip(rows, split(decode_lines(spark.createDataFrame(rows, RAW_SCHEMA)), rows)):
            if line is not None and line.strip(" ") == "":
                assert event is None and letter is None  # blank lines are ignored
                continue
            assert (event is None) != (letter is None), (line, at, event, letter)
            if event is not None:
                assert event.line is not None
                assert_a_good_time(event.event_time, event.ingest_time, TEXT_LINE)
            else:
                assert letter.reason and letter.ingest_time == at, letter

    check()
