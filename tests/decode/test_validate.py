"""decode: typed events out, every refused payload a dead letter with its reason; no rows of nulls."""

from dataclasses import replace
from datetime import datetime

from speedlayer.core.schemas import RAW_SCHEMA, EventSchema, Field
from speedlayer.decode.validate import decode
from speedlayer.pipelines.fleet.schemas import VEHICLE_EVENT

INGEST = datetime(2026, 11, 22, 10, 0, 5)
GOOD = '{"event_id":"e-1","vehicle_id":"V0001","event_time":"2026-11-22T10:00:03.250Z","speed_kmh":87.5,"lat":52.52,"lon":13.405}'


def raw(spark, *payloads):
    return spark.createDataFrame([(p, None, str(i), INGEST) for i, p in enumerate(payloads)], RAW_SCHEMA)


def test_a_valid_payload_becomes_a_typed_event(spark):
    events = decode(raw(spark, GOOD), VEHICLE_EVENT).events.collect()
    assert len(events) == 1
    e = events[0]
    assert (e.event_id, e.vehicle_id, e.speed_kmh, e.lat, e.lon) == ("e-1", "V0001", 87.5, 52.52, 13.405)
    assert e.event_time == datetime(2026, 11, 22, 10, 0, 3, 250000)
    assert (e.ingest_time, e.offset) == (INGEST, "0")  # the source's offset: which re-sent copy counts


def test_numeric_event_time_is_epoch_milliseconds(spark):
    payload = GOOD.replace('"2026-11-22T10:00:03.250Z"', "1795341603250")
    event = decode(raw(spark, payload), VEHICLE_EVENT).events.collect()[0]
    assert event.event_time == datetime(2026, 11, 22, 10, 0, 3, 250000)


#: (payload, the reason decode gives) of each kind of bad payload; each test decodes a list like this one
#: in one DataFrame, one row per case, and compares by the row's offset (its index)
BAD_PAYLOADS = [
    ('{"event_id":"e-1","vehicle_id":"V1"', "malformed JSON: not a JSON object"),
    ("#garbage 17", "malformed JSON: not a JSON object"),
    ("[1, 2]", "malformed JSON: not a JSON object"),
    (GOOD.replace('"vehicle_id":"V0001",', ""), "missing field 'vehicle_id'"),
    (GOOD.replace('"V0001"', '""'), "missing field 'vehicle_id'"),
    (GOOD.replace("87.5", '"fast"'), "field 'speed_kmh' is not a valid double"),
    (GOOD.replace("87.5", "-3"), "field 'speed_kmh' is outside [0, 400]"),
    (GOOD.replace("87.5", "999.9"), "field 'speed_kmh' is outside [0, 400]"),
    (GOOD.replace("52.52", "123.4"), "field 'lat' is outside [-90, 90]"),
    (GOOD.replace("13.405", "-181"), "field 'lon' is outside [-180, 180]"),
    (GOOD.replace("2026-11-22T10:00:03", "2026-11-25T10:00:03"), "field 'event_time' is more than 1s ahead of ingest time"),
    (GOOD.replace("2026-11-22T10:00:03.250Z", "0001-01-01T00:00:00Z"),
     "field 'event_time' is before 2000-01-01T00:00:00Z: a reset clock"),
    (GOOD.replace('"2026-11-22T10:00:03.250Z"', "0"), "field 'event_time' is before 2000-01-01T00:00:00Z: a reset clock"),
    # epoch milliseconds past what a Spark timestamp holds (they failed the whole batch: DATETIME_OVERFLOW)
    (GOOD.replace('"2026-11-22T10:00:03.250Z"', "10000000000000000"),
     "field 'event_time' is not a valid timestamp (ISO-8601 or epoch milliseconds)"),
    (GOOD.replace('"2026-11-22T10:00:03.250Z"', '"-9223372036854775808"'),
     "field 'event_time' is not a valid timestamp (ISO-8601 or epoch milliseconds)"),
    (GOOD.replace("2026-11-22T10:00:03.250Z", "+294247-01-10T04:00:54Z"),
     "field 'event_time' is not before 2262-01-01T00:00:00Z: a clock gone wrong"),
    (GOOD.replace("2026-11-22T10:00:03.250Z", "yesterday"),
     "field 'event_time' is not a valid timestamp (ISO-8601 or epoch milliseconds)"),
]


def by_offset(rows, *columns) -> dict:
    """``{offset: row's columns}`` of collected rows (one column: its value)."""
    return {r.offset: r[columns[0]] if len(columns) == 1 else tuple(r[c] for c in columns) for r in rows}


def test_each_kind_of_bad_payload_is_a_dead_letter_with_its_reason(spark):
    decoded = decode(raw(spark, *(payload for payload, _ in BAD_PAYLOADS)), VEHICLE_EVENT)
    assert decoded.events.count() == 0
    assert by_offset(decoded.dead_letters.collect(), "payload", "reason", "ingest_time") == {
        str(i): (payload, reason, INGEST) for i, (payload, reason) in enumerate(BAD_PAYLOADS)}


def test_good_and_bad_are_split_without_loss(spark):
    payloads = [GOOD, "nope", GOOD.replace("e-1", "e-2"), GOOD.replace("87.5", "-1")]
    decoded = decode(raw(spark, *payloads), VEHICLE_EVENT)
    assert decoded.events.count() + decoded.dead_letters.count() == len(payloads)
    assert sorted(r.event_id for r in decoded.events.collect()) == ["e-1", "e-2"]


EVENT_TIME_FORMS = [
    ('"2026-11-22T10:00:03.250Z"', datetime(2026, 11, 22, 10, 0, 3, 250000)),   # ISO-8601, UTC
    ('"2026-11-22T11:00:03.250+01:00"', datetime(2026, 11, 22, 10, 0, 3, 250000)),  # with an offset
    ('"2026-11-22 10:00:03"', datetime(2026, 11, 22, 10, 0, 3)),               # space, no fraction
    ('" 2026-11-22T10:00:03Z"', datetime(2026, 11, 22, 10, 0, 3)),             # leading space
    ("1795341603250", datetime(2026, 11, 22, 10, 0, 3, 250000)),               # epoch milliseconds
    ('"1795341603250"', datetime(2026, 11, 22, 10, 0, 3, 250000)),             # ... sent as a string
    ("946684800000", datetime(2000, 1, 1)),                                     # the earliest accepted
]


def test_event_time_forms(spark):
    payloads = [GOOD.replace('"2026-11-22T10:00:03.250Z"', text) for text, _ in EVENT_TIME_FORMS]
    events = decode(raw(spark, *payloads), VEHICLE_EVENT).events.collect()
    assert by_offset(events, "event_time") == {str(i): expected for i, (_, expected) in enumerate(EVENT_TIME_FORMS)}


#: What a typed parse alone would refuse, or take differently, and decode accepts as the text says.
LENIENT = [
    (("87.5", '"87.5"'), {"speed_kmh": 87.5}),                         # a number sent as a string
    (("87.5", "87"), {"speed_kmh": 87.0}),                             # an integer for a double
    (('"V0001"', "1"), {"vehicle_id": "1"}),                            # a number for a string
    (('"2026-11-22T10:00:03.250Z"', '"1795341603250"'), {"event_time": datetime(2026, 11, 22, 10, 0, 3, 250000)}),
]


def test_lenient_values_are_accepted_as_the_text_says(spark):
    events = decode(raw(spark, *(GOOD.replace(*edit) for edit, _ in LENIENT)), VEHICLE_EVENT).events.collect()
    assert {e.offset: {name: e[name] for name in LENIENT[int(e.offset)][1]} for e in events} == {
        str(i): expected for i, (_, expected) in enumerate(LENIENT)}


TYPED_PARSE_WOULD_TAKE = [
    (("87.5", "NaN"), "field 'speed_kmh' is not a valid double"),
    (("87.5", '"NaN"'), "field 'speed_kmh' is not a valid double"),
    (("87.5", "[1]"), "field 'speed_kmh' is not a valid double"),
    (("87.5", "1e400"), "field 'speed_kmh' is not a valid double"),
    (('"V0001"', '"  "'), "missing field 'vehicle_id'"),
]


def test_values_a_typed_parse_would_take_are_still_refused(spark):
    decoded = decode(raw(spark, *(GOOD.replace(*edit) for edit, _ in TYPED_PARSE_WOULD_TAKE)), VEHICLE_EVENT)
    assert by_offset(decoded.dead_letters.collect(), "reason") == {
        str(i): reason for i, (_, reason) in enumerate(TYPED_PARSE_WOULD_TAKE)}
    assert decoded.events.count() == 0


#: the typed parse, and the text path (the speed sent as text)
SPEEDS = ["87.5", '"87.5"']


def test_event_time_ahead_of_ingest_time_boundary(spark):
    cases = [(event_time, accepted, speed) for event_time, accepted in [
        ("2026-11-22T10:00:06.000Z", True),    # exactly max_ahead (1 s by default) after ingest time
        ("2026-11-22T10:00:06.001Z", False),   # a millisecond more
        ("1795341606000", True),               # the same two as epoch milliseconds
        ("1795341606001", False),
    ] for speed in SPEEDS]
    payloads = [GOOD.replace('"2026-11-22T10:00:03.250Z"', t if t.isdigit() else f'"{t}"').replace("87.5", speed)
                for t, _, speed in cases]
    decoded = decode(raw(spark, *payloads), VEHICLE_EVENT)
    assert sorted(int(e.offset) for e in decoded.events.collect()) == [i for i, c in enumerate(cases) if c[1]]
    assert by_offset(decoded.dead_letters.collect(), "reason") == {
        str(i): "field 'event_time' is more than 1s ahead of ingest time" for i, c in enumerate(cases) if not c[1]}


def test_event_times_before_2000_are_a_reset_clock(spark):
    reset = "field 'event_time' is before 2000-01-01T00:00:00Z: a reset clock"
    cases = [(event_time, reason, speed) for event_time, reason in [
        ("1999-12-31T23:59:59.999Z", reset), ("1980-01-06T00:00:00Z", reset),  # the GPS epoch
        ("2000-01-01T00:00:00Z", None),
    ] for speed in SPEEDS]
    payloads = [GOOD.replace("2026-11-22T10:00:03.250Z", t).replace("87.5", speed) for t, _, speed in cases]
    decoded = decode(raw(spark, *payloads), VEHICLE_EVENT)
    assert by_offset(decoded.dead_letters.collect(), "reason") == {str(i): c[1] for i, c in enumerate(cases) if c[1]}
    assert sorted(int(e.offset) for e in decoded.events.collect()) == [i for i, c in enumerate(cases) if not c[1]]


def test_the_allowance_is_the_schemas_and_a_bad_ingest_time_refuses_only_its_event(spark):
    hour_ahead = GOOD.replace("2026-11-22T10:00:03", "2026-11-22T11:00:03")
    far = GOOD.replace("2026-11-22T10:00:03.250Z", "9999-12-31T00:00:00Z")
    rows = [(hour_ahead, None, "0", INGEST), (GOOD, None, "1", None), (far, None, "2", datetime(9999, 12, 31, 1)),
            (GOOD, None, "3", INGEST)]
    decoded = decode(spark.createDataFrame(rows, RAW_SCHEMA), replace(VEHICLE_EVENT, max_ahead_ms=3_600_000))
    assert sorted(e.event_id for e in decoded.events.collect()) == ["e-1", "e-1"]  # an hour ahead is allowed here
    assert sorted((d.offset, d.reason) for d in decoded.dead_letters.collect()) == [
        ("1", "field 'event_time' cannot be checked: the source gave no ingest time"),
        ("2", "field 'event_time' is not before 2262-01-01T00:00:00Z: a clock gone wrong")]


def test_an_ingest_time_at_the_end_of_spark_time_fails_no_batch(spark):
    # the ahead check adds the allowance to the ingest time: at Spark's last microsecond that overflowed
    from pyspark.sql import functions as F

    frame = raw(spark, GOOD, GOOD.replace("87.5", '"87.5"')).withColumn("ingest_time", F.timestamp_micros(F.lit(2**63 - 1)))
    decoded = decode(frame, VEHICLE_EVENT)
    # the fast path and the text path; each event's own time is sane, so it passes
    assert [e.event_id for e in decoded.events.select("event_id").collect()] == ["e-1", "e-1"]
    assert decoded.dead_letters.select("reason").count() == 0


def test_a_bound_given_alone_is_checked_too(spark):
    from speedlayer.core.schemas import EventSchema, Field

    schema = EventSchema("order", (Field("id", "string"), Field("amount", "double", min=0), Field("qty", "long", max=10),
                                   Field("t", "timestamp")), time_field="t")
    order = '{{"id":"o{0}","amount":{1},"qty":{2},"t":"2026-11-22T10:00:00Z"}}'
    decoded = decode(raw(spark, order.format(1, 5.5, 3), order.format(2, -1, 3), order.format(3, 1, 11)), schema)
    assert [e.id for e in decoded.events.collect()] == ["o1"]
    assert sorted(d.reason for d in decoded.dead_letters.collect()) == [
        "field 'amount' is below 0", "field 'qty' is above 10"]


# --- optional fields, booleans, one-sided bounds (job files) ---------------------------------------

ORDER = EventSchema(
    name="order",
    fields=(Field("id", "string"), Field("amount", "double", min=0), Field("items", "long", max=99, required=False),
            Field("coupon", "string", choices=("A", "B"), required=False), Field("gift", "boolean", required=False),
            Field("at", "timestamp")),
    time_field="at",
)
ORDER_OK = '{"id": "o-1", "amount": 10.5, "items": 3, "coupon": "A", "gift": true, "at": "2026-11-22T10:00:03Z"}'


OPTIONAL = [
    ((), ("o-1", 10.5, 3, "A", True)),
    (('"items": 3, ', ""), ("o-1", 10.5, None, "A", True)),                 # an optional field missing
    (('"coupon": "A"', '"coupon": null'), ("o-1", 10.5, 3, None, True)),    # ... null
    (('"coupon": "A"', '"coupon": " "'), ("o-1", 10.5, 3, None, True)),     # ... blank
    (('"gift": true, ', ""), ("o-1", 10.5, 3, "A", None)),
    (("true", "false"), ("o-1", 10.5, 3, "A", False)),
    (("true", '"true"'), ("o-1", 10.5, 3, "A", True)),                       # a boolean sent as text (text path)
    (('"items": 3', '"items": "3"'), ("o-1", 10.5, 3, "A", True)),          # a number sent as text
    (("10.5", "1e9"), ("o-1", 1e9, 3, "A", True)),                           # no upper bound on amount
]


def test_optional_fields_may_be_missing_and_booleans_are_typed(spark):
    payloads = []
    for edit, _ in OPTIONAL:  # each case twice: the fast path, and the text path (amount as text)
        payload = ORDER_OK.replace(*edit) if edit else ORDER_OK
        payloads += [payload, payload.replace('"o-1"', '"o-2"').replace("10.5", '"10.5"')]
    decoded = decode(raw(spark, *payloads), ORDER)
    assert by_offset(decoded.events.collect(), *(f.name for f in ORDER.fields[:5])) == {
        str(2 * i + copy): (("o-1", "o-2")[copy], *expected[1:]) for i, (_, expected) in enumerate(OPTIONAL) for copy in (0, 1)}
    assert decoded.dead_letters.count() == 0


OPTIONAL_BAD = [
    (("10.5", "-1"), "field 'amount' is below 0"),
    (('"items": 3', '"items": 100'), "field 'items' is above 99"),
    (('"items": 3', '"items": "many"'), "field 'items' is not a valid long"),
    (('"coupon": "A"', '"coupon": "C"'), "field 'coupon' is not one of A, B"),
    (("true", '"maybe"'), "field 'gift' is not a valid boolean"),
    (("true", "[true]"), "field 'gift' is not a valid boolean"),
    (('"id": "o-1", ', ""), "missing field 'id'"),                            # required stays required
]


def test_an_optional_field_with_a_bad_value_is_still_refused(spark):
    decoded = decode(raw(spark, *(ORDER_OK.replace(*edit) for edit, _ in OPTIONAL_BAD)), ORDER)
    assert by_offset(decoded.dead_letters.collect(), "reason") == {str(i): r for i, (_, r) in enumerate(OPTIONAL_BAD)}
    assert decoded.events.count() == 0
