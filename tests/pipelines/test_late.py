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
                                          ", the field re-sent copies of an event share, or drop the output"):
        dataclasses.replace(ORDERS, dedup_key=None)
    with pytest.raises(ConfigError, match="dedup_key 'id' is not a field of its events .order_id, placed_at, total."):
        dataclasses.replace(ORDERS, dedup_key="id")


def test_late_events_of_a_job_without_a_dedup_key_says_the_fix(spark):
    keyless = Job(name="keyless", summary="", schema=ORDER, pipeline=orders_pipeline, outputs={})
    events = spark.createDataFrame([], "order_id string, placed_at timestamp, total double, ingest_time timestamp")
    with pytest.raises(ConfigError, match="has no dedup_key, which its late output keys on: declare"):
        late_events(events, keyless, Params())
