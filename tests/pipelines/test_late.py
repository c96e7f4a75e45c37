"""The ``late`` output, the public way any job offers it: ``Job.dedup_key``, ``LATE``, ``late_events``."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.core.modes import APPEND
from speedlayer.core.schemas import EventSchema, Field
from speedlayer.pipelines import BUILTIN_JOBS, jobs
from speedlayer.pipelines.base import DEAD_LETTERS, LATE, Job, Output, Params
from speedlayer.pipelines.dedup import drop_duplicates
from speedlayer.pipelines.late import late_events
from speedlayer.pipelines.ops import with_watermark

ORDER = EventSchema("order", (Field("order_id", "string"), Field("placed_at", "timestamp"), Field("total", "double")),
                    time_field="placed_at")


def orders_pipeline(events, params):
    watermarked = with_watermark(events, params, ORDER.time_field)
    return {"orders": drop_duplicates(watermarked, params, ORDERS.dedup_key),
            "late": late_events(watermarked, ORDERS, params)}


ORDERS = Job(name="orders", summary="a user's own job", schema=ORDER, pipeline=orders_pipeline, dedup_key="order_id",
             outputs={"orders": Output("orders", "orders", (APPEND,), APPEND, True, ("order_id",)),
                      "dead-letters": DEAD_LETTERS, "late": LATE})


def test_a_users_job_declares_its_dedup_key_once_and_late_is_keyed_by_it(spark):
    assert ORDERS.outputs["late"].key == ("order_id", "missed_watermark")
    assert list(ORDERS.outputs) == ["orders", "dead-letters", "late"]
    events = spark.createDataFrame([("o1", datetime(2026, 11, 22, 10), 9.5, datetime(2026, 11, 22, 10))],
                                   "order_id string, placed_at timestamp, total double, ingest_time timestamp")
    late = ORDERS.pipeline(events, Params())["late"]
    assert late.count() == 0  # a static DataFrame has no watermark: nothing in it is late
    assert [(f.name, f.dataType.simpleString()) for f in late.schema.fields] == [
        ("order_id", "string"), ("placed_at", "timestamp"), ("total", "double"), ("window_start", "timestamp"),
        ("window_end", "timestamp"), ("missed_watermark", "timestamp"), ("copies", "bigint")]


def test_the_built_in_jobs_declare_their_dedup_keys_and_late_the_same_way():
    keys = {name: (job.dedup_key, job.outputs["late"].key if "late" in job.outputs else None)
            for name, job in jobs().items() if name in BUILTIN_JOBS}
    assert keys == {"fleet": ("event_id", ("event_id", "missed_watermark")), "wordcount": (None, None),
                    "app-actions": ("id", ("id", "missed_watermark")), "fraud": ("tx_id", ("tx_id", "missed_watermark"))}
    assert "--slide step" in jobs()["app-actions"].outputs["late"].summary


def test_late_without_a_dedup_key_or_a_key_outside_the_schema_says_the_fix():
    with pytest.raises(ConfigError, match="lists the late output but declares no dedup_key: give Job.dedup_key=FIELD."
                                          ", the field re-sent copies of an event share .or a tuple of the fields they "
                                          "share together., or drop the output"):
        dataclasses.replace(ORDERS, dedup_key=None)
    with pytest.raises(ConfigError, match="dedup_key 'id' is not a field of its events .order_id, placed_at, total."):
        dataclasses.replace(ORDERS, dedup_key="id")


def test_late_events_of_a_job_without_a_dedup_key_says_the_fix(spark):
    keyless = Job(name="keyless", summary="", schema=ORDER, pipeline=orders_pipeline, outputs={})
    events = spark.createDataFrame([], "order_id string, placed_at timestamp, total double, ingest_time timestamp")
    with pytest.raises(ConfigError, match="has no dedup_key, which its late output keys on: declare"):
        late_events(events, keyless, Params())


READING = EventSchema("reading", (Field("device_id", "string"), Field("at", "timestamp"), Field("value", "double"),
                                  Field("note", "string", required=False)), time_field="at")


def reading_job(key, outputs=None):
    return Job(name="readings", summary="", schema=READING, pipeline=orders_pipeline, dedup_key=key,
               outputs={"dead-letters": DEAD_LETTERS, "late": LATE} if outputs is None else outputs)


def test_a_composite_key_keys_the_late_output_by_all_its_fields_the_event_time_among_them():
    job = reading_job(("device_id", "at"))
    assert job.dedup_fields == ("device_id", "at") and job.outputs["late"].key == ("device_id", "at", "missed_watermark")
    assert reading_job(["device_id", "at"]).dedup_key == ("device_id", "at")  # a list is taken as the tuple
    assert ORDERS.dedup_fields == ("order_id",) and ORDERS.dedup_key == "order_id"
    assert reading_job("at", outputs={}).dedup_fields == ("at",)  # without the late output, the time alone may do


@pytest.mark.parametrize("key,message", [
    ((), r"dedup_key names no field: give the field, or the fields together, that identify an event, "
         r"e.g. Job\(dedup_key=\('device_id', 'reading_time'\)\), or no dedup_key"),
    (("device_id", "at", "device_id"), "dedup_key names 'device_id' twice: list each field once"),
    (("device_id", "when"), r"dedup_key 'when' is not a field of its events \(device_id, at, value, note\): name the "
                            "field, or the fields together, that identify an event"),
    (("device_id", "note"), "dedup_key 'note' is an optional field: events without it would all count as copies of one "
                            "event; make the field required or key on other fields"),
    (("device_id", 3), "dedup_key holds 3, which is not a field name: give field names as text"),
    ("at", r"dedup_key 'at' is the event time alone, which does not tell events apart \(two events of one instant would "
           r"count as copies of one, in the late output too\): key on the time together with the field that tells their "
           r"sources apart, e.g. Job\(dedup_key=\('device_id', 'at'\)\)"),
    ({"device_id", "at"}, r"dedup_key must be a field name or a tuple of field names, not set: e.g. Job\(dedup_key="),
])
def test_each_wrong_composite_key_is_one_line_with_the_fix(key, message):
    with pytest.raises(ConfigError, match=f"^job 'readings': {message}") as refused:
        reading_job(key)
    assert "\n" not in str(refused.value)
