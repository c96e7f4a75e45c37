"""What the sink tests share: a small fleet run, hand-made batches, and reading results back into Spark."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from speedlayer.sinks.base import Target

START = "2026-11-22T10:00:00Z"
#: 6,000 events over 30 s of event time, 50 vehicles: ~200 windows, ~150 alerts, a few dead letters
SOURCE = f"generator://?seed=7&late=0&rate=200&vehicles=50&rows_per_batch=2000&start={START}"
MAX_EVENTS = 6000

WINDOW_KEY = ("window_start", "window_end", "vehicle_id")
WINDOWS_SCHEMA = T.StructType([
    T.StructField("window_start", T.TimestampType()), T.StructField("window_end", T.TimestampType()),
    T.StructField("vehicle_id", T.StringType()), T.StructField("events", T.LongType()),
    T.StructField("avg_speed_kmh", T.DoubleType()),
])
ALERTS_SCHEMA = T.StructType([
    T.StructField("event_id", T.StringType()), T.StructField("vehicle_id", T.StringType()),
    T.StructField("event_time", T.TimestampType()), T.StructField("speed_kmh", T.DoubleType()),
    T.StructField("zone_name", T.StringType()),
])


def settings(tmp_path: Path, sinks: dict[str, str], **kwargs) -> RunSettings:
    return RunSettings(job="fleet", source=SOURCE, max_events=MAX_EVENTS, sinks=sinks,
                       state_dir=str(tmp_path / "state"), trigger="processing:0s", **kwargs)


def unmoded(s: RunSettings) -> RunSettings:
    """The settings without output modes, for ``batch_output`` (its memory sink takes append only)."""
    return s.model_copy(update={"output_mode": {}})


def run(spark, s: RunSettings):
    summary = Run(spark, plan_run(s)).start_and_wait()
    assert summary.stopped_by == f"--max-events {MAX_EVENTS}", summary
    return summary


def target(output: str, mode: str = "append", key: tuple[str, ...] | None = None, fresh: bool = False) -> Target:
    key = key if key is not None else (WINDOW_KEY if output in ("windows", "sliding") else ("event_id",))
    return Target("fleet", output, f"fleet_{output}", mode=mode, key=key, fresh_checkpoint=fresh)


def at(second: float) -> dt.datetime:
    return dt.datetime(2026, 11, 22, 10, 0, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=second)


def window(start_s: int, vehicle: str, events: int, avg: float) -> tuple:
    return (at(start_s), at(start_s + 10), vehicle, events, avg)


def windows_frame(spark, rows: list[tuple]) -> DataFrame:
    return spark.createDataFrame(rows, WINDOWS_SCHEMA)


def alerts_frame(spark, n: int, first: int = 0) -> DataFrame:
    rows = [(f"e-{i:06d}", f"V{i % 7:04d}", at(i / 10), 60.0 + i / 3, "Mitte, \"Unter den Linden\"")
            for i in range(first, first + n)]
    return spark.createDataFrame(rows, ALERTS_SCHEMA)


def as_frame(spark, rows, like: DataFrame) -> DataFrame:
    """Rows read back from a server as a DataFrame shaped like ``like`` (naive datetimes are UTC)."""
    fixed = [tuple(v.replace(tzinfo=dt.timezone.utc) if isinstance(v, dt.datetime) and v.tzinfo is None else v
                   for v in row) for row in rows]
    return spark.createDataFrame(fixed, like.schema)
