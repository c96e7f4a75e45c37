"""Which copy of a re-sent event counts: the lowest offset, whatever order the copies come in."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from speedlayer.core.errors import ConfigError
from speedlayer.core.offsets import offset_order_column, offset_rank
from speedlayer.pipelines.base import Params
from speedlayer.pipelines.dedup import drop_duplicates, lowest_offset_first

# (event_id, speed, offset): x and y were re-sent with other readings, in other files and lines
ROWS = [("x", 90.0, "/in/f2.jsonl:10"), ("y", 50.0, "/in/f10.jsonl:1"), ("x", 95.0, "/in/f2.jsonl:9"),
        ("z", 70.0, "/in/f1.jsonl:3"), ("y", 55.0, "/in/f9.jsonl:7"), ("x", 99.0, "/in/f11.jsonl:1")]


def oracle(rows):
    """Per event_id, the speed of the copy with the lowest (file number, line number)."""
    def where(offset):
        name, line = offset.rsplit(":", 1)
        return int(name.split("/f")[-1].split(".")[0]), int(line)

    best = {}
    for eid, speed, offset in rows:
        if eid not in best or where(offset) < best[eid][0]:
            best[eid] = (where(offset), speed)
    return {eid: speed for eid, (_, speed) in best.items()}


def test_the_lowest_offset_copy_comes_first_in_any_order_and_batching():
    reorder = lowest_offset_first("event_id")
    expected = oracle(ROWS)
    assert expected == {"x": 95.0, "y": 55.0, "z": 70.0}
    for order in itertools.permutations(ROWS):
        for cut in (1, 3, 5):  # the partition's rows in Arrow batches of various sizes
            batches = [pa.RecordBatch.from_pylist([dict(zip(("event_id", "speed_kmh", "offset"), r)) for r in part])
                       for part in (order[:cut], order[cut:])]
            out = [(r["event_id"], r["speed_kmh"]) for b in reorder(iter(batches)) for r in b.to_pylist()]
            first = {}
            for eid, speed in out:  # what Spark's dedup keeps: the first copy it meets
                first.setdefault(eid, speed)
            assert first == expected and sorted(out) == sorted((eid, speed) for eid, speed, _ in ROWS)


def test_python_and_spark_order_offsets_alike(spark):
    offsets = ["p/10", "p/9", "1/5", "0/900", "f10.json:2", "f9.json:12", "f9.json:3", "s/1700000000001-0",
               "s/1700000000000-12", "", "007", "7", "123456789012345678901234", "99999999999999999999"]
    by_python = sorted(offsets + [None], key=offset_rank)
    df = spark.createDataFrame([(o,) for o in offsets + [None]], "offset string")
    by_spark = [r.offset for r in df.orderBy(offset_order_column(F.col("offset")).asc_nulls_last(),
                                             F.col("offset").asc_nulls_last()).collect()]
    assert by_spark == by_python
    assert by_python.index("p/9") < by_python.index("p/10") and by_python[-1] is None
    assert by_python.index("s/1700000000000-12") < by_python.index("s/1700000000001-0")


def test_a_static_frame_keeps_the_lowest_offset_copy_and_drops_the_offset(spark):
    events = spark.createDataFrame(ROWS, "event_id string, speed_kmh double, offset string")
    out = drop_duplicates(events.repartition(3), Params())
    assert out.columns == ["event_id", "speed_kmh"]
    assert {r.event_id: r.speed_kmh for r in out.collect()} == oracle(ROWS)


def test_an_unknown_mode_is_refused_when_the_query_is_built(spark):
    events = spark.readStream.format("rate").load().selectExpr("cast(value as string) as event_id",
                                                                "timestamp", "'0' as offset")
    with pytest.raises(ConfigError, match="exact .* or fast"):
        drop_duplicates(events.withWatermark("timestamp", "5 seconds"), Params(dedup="exakt"))


# readings without an id: (device, time) identifies one; D1 at 0 re-sent thrice, D2 at 0 another event
READINGS = [("D1", 0, 1.0, "/in/f2.jsonl:10"), ("D2", 0, 2.0, "/in/f2.jsonl:11"), ("D1", 0, 3.0, "/in/f2.jsonl:9"),
            ("D1", 5, 4.0, "/in/f1.jsonl:3"), ("D1", 0, 5.0, "/in/f10.jsonl:1"), ("D2", 5, 6.0, "/in/f9.jsonl:7")]


def test_a_composite_keys_lowest_offset_copy_comes_first_in_any_order():
    reorder = lowest_offset_first(("device_id", "t"))
    for order in itertools.permutations(READINGS):
        batches = [pa.RecordBatch.from_pylist([dict(zip(("device_id", "t", "value", "offset"), r)) for r in part])
                   for part in (order[:2], order[2:])]
        out = [(r["device_id"], r["t"], r["value"]) for b in reorder(iter(batches)) for r in b.to_pylist()]
        first = {}
        for device, t, value in out:
            first.setdefault((device, t), value)
        assert first == {("D1", 0): 3.0, ("D2", 0): 2.0, ("D1", 5): 4.0, ("D2", 5): 6.0}
        assert sorted(out) == sorted(r[:3] for r in READINGS)

