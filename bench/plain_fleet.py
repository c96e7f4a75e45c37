"""The fleet job's outputs written by hand in plain PySpark, for the throughput benchmark.

``plain_windows`` is the first baseline, the ``windows`` output alone, as a user would write it
without speedlayer: ``from_json`` into a typed schema, a 5 s watermark,
``dropDuplicatesWithinWatermark(["event_id"])``, the zone speed limit as a CASE WHEN over the zones
table, and 10 s tumbling windows per vehicle, in append mode. No validation and no dead letters: a
payload that fails to parse simply becomes a row of nulls (its input had no malformed payloads).
It works on a stream and, for the equal-results check, on a static DataFrame (where it drops every
duplicate with ``dropDuplicates``, as Spark refuses the watermark form in batch).

``plain_outputs`` is the whole job's seven outputs (windows, sliding, alerts, dead-letters,
incidents, trips, late), one streaming query per output, each reading the source itself, on a
stream only. It validates (required fields present, values in range, no event time ahead of its
ingest time) before ``withWatermark``; the zone is a CASE WHEN giving a struct of id, name and
limit (first matching rectangle wins, as the zones overlap: a broadcast join would need a
tie-break); incidents, trips and late events are ``transformWithStateInPandas`` processors written
here, keyed by vehicle (late events: by one constant key), as Spark's documentation shows them.
Their rows equal speedlayer's (``bench/whole_job.py --check``); dead letters carry reasons of their
own words, so the check compares them without ``reason``.

The one thing it borrows from speedlayer is its *input*: ``raw_stream``/``raw_batch`` call
``speedlayer.pipelines.fleet.vehicle_kind.vehicle_events`` on Spark's ``rate-micro-batch`` source (or
``spark.range``), so both sides of the benchmark read byte-for-byte the same JSON payloads.
The zones come from the same CSV file speedlayer ships (data, not code).
"""

from __future__ import annotations

import csv
import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues

WATERMARK = "5 seconds"
WINDOW = "10 seconds"

EVENT_SCHEMA = T.StructType(
    [
        T.StructField("event_id", T.StringType()),
        T.StructField("vehicle_id", T.StringType()),
        T.StructField("event_time", T.TimestampType()),
        T.StructField("speed_kmh", T.DoubleType()),
        T.StructField("lat", T.DoubleType()),
        T.StructField("lon", T.DoubleType()),
    ]
)


def load_zone_rows() -> list[dict[str, str]]:
    """Rows of the zones CSV shipped in the speedlayer package (first matching rectangle wins)."""
    text = resources.files("speedlayer.data").joinpath("zones.csv").read_text()
    return list(csv.DictReader(text.splitlines()))


def _inside(lat: Column, lon: Column, z: dict[str, str]) -> Column:
    """Whether lat/lon lies in zone ``z``'s rectangle."""
    return lat.between(float(z["min_lat"]), float(z["max_lat"])) & lon.between(float(z["min_lon"]), float(z["max_lon"]))


def speed_limit(lat: Column, lon: Column, zones: list[dict[str, str]]) -> Column:
    """CASE WHEN lat/lon inside zone 1 THEN limit 1 WHEN ... END, as a user would hand-write it."""
    expr = None
    for z in zones:
        inside = _inside(lat, lon, z)
        limit = F.lit(float(z["speed_limit_kmh"]))
        expr = F.when(inside, limit) if expr is None else expr.when(inside, limit)
    return expr


def plain_windows(raw: DataFrame) -> DataFrame:
    """Per-vehicle 10 s windows from RAW rows (a ``value`` column holding the JSON payload)."""
    events = raw.select(F.from_json("value", EVENT_SCHEMA).alias("e")).select("e.*")
    if events.isStreaming:
        events = events.withWatermark("event_time", WATERMARK).dropDuplicatesWithinWatermark(["event_id"])
    else:  # the batch version, for the equal-results check (Spark refuses the watermark form in batch)
        events = events.dropDuplicates(["event_id"])
    events = events.withColumn("speed_limit_kmh", speed_limit(F.col("lat"), F.col("lon"), load_zone_rows()))
    over = F.when(F.col("speed_kmh") > F.col("speed_limit_kmh"), 1).otherwise(0)
    windows = events.groupBy(F.window("event_time", WINDOW), "vehicle_id").agg(
        F.count(F.lit(1)).alias("events"),
        F.avg("speed_kmh").alias("avg_speed_kmh"),
        F.max("speed_kmh").alias("max_speed_kmh"),
        F.sum(over).cast("long").alias("over_limit_events"),
    )
    return windows.select(
        F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
        "vehicle_id", "events", "avg_speed_kmh", "max_speed_kmh", "over_limit_events",
    )


def _generator(uri: str):
    # Only to produce the identical input: the generator's options and event-time origin.
    from speedlayer.sources import open_source

    source = open_source(uri)
    if source.start_ms is None:
        raise ValueError("give the generator a fixed start= so that both sides read the same events")
    return source


def raw_stream(spark: SparkSession, uri: str) -> DataFrame:
    """RAW rows from ``rate-micro-batch`` (the generator URI must have rows_per_batch and start)."""
    from speedlayer.pipelines.fleet.vehicle_kind import vehicle_events

    source = _generator(uri)
    opts = source.options
    if not opts.rows_per_batch:
        raise ValueError("the benchmark needs rows_per_batch= in the generator URI")
    reader = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", opts.rows_per_batch)
    if opts.partitions:
        reader = reader.option("numPartitions", opts.partitions)
    seq = reader.load().select(F.col("value").alias("n"))
    return vehicle_events(seq, opts, source.start_ms)


def raw_batch(spark: SparkSession, uri: str, events: int) -> DataFrame:
    """The same RAW rows for events 0 .. events-1 as a static DataFrame."""
    from speedlayer.pipelines.fleet.vehicle_kind import vehicle_events

    source = _generator(uri)
    seq = spark.range(0, events, numPartitions=source.options.partitions or spark.sparkContext.defaultParallelism)
    return vehicle_events(seq.select(F.col("id").alias("n")), source.options, source.start_ms)


# --- the seven outputs -----------------------------------------------------------------------------
#
# What a user writes for the whole fleet job, one streaming query per output, each reading the
# source itself. Unlike ``plain_windows`` (whose input had no malformed payloads) these validate:
# the feed carries malformed payloads and one output is the rows refused. Invalid rows are removed
# *before* ``withWatermark``, since one event stamped two days ahead would move the watermark for good.


@dataclass(frozen=True)
class PlainSettings:
    """The job's settings, written out by hand (speedlayer's defaults); durations in milliseconds."""

    watermark_ms: int = 5_000
    window_ms: int = 10_000
    sliding_ms: int = 60_000
    slide_ms: int = 10_000
    max_ahead_ms: int = 1_000
    trip_gap_ms: int = 300_000
    max_trip_ms: int = 3_600_000
    incident_after_ms: int = 10_000
    incident_timeout_ms: int = 30_000


OUTPUTS = ("windows", "sliding", "alerts", "dead-letters", "incidents", "trips", "late")
EARLIEST = "2000-01-01 00:00:00"


def _interval(ms: int) -> str:
    return f"{ms / 1000:g} seconds"


def parsed(raw: DataFrame) -> DataFrame:
    """RAW rows with the payload parsed (``e``) and whether the event is usable (``ok``)."""
    e = F.col("e")
    ok = (e["event_id"].isNotNull() & e["vehicle_id"].isNotNull() & e["event_time"].isNotNull()
          & e["speed_kmh"].between(0, 400) & e["lat"].between(-90, 90) & e["lon"].between(-180, 180)
          & (e["event_time"] >= F.lit(EARLIEST).cast("timestamp")))
    return (raw.select("value", "key", "offset", "ingest_time", F.from_json("value", EVENT_SCHEMA).alias("e"))
            .withColumn("ok", F.coalesce(ok, F.lit(False))))


def accepted(s: PlainSettings) -> Column:
    """``ok``, and an event time at most ``max_ahead_ms`` ahead of the ingest time (a clock gone wrong)."""
    ahead = F.col("e.event_time") > F.col("ingest_time") + F.expr(f"INTERVAL {s.max_ahead_ms} MILLISECONDS")
    return F.col("ok") & ~F.coalesce(ahead, F.lit(True))


def valid_events(raw: DataFrame, s: PlainSettings) -> DataFrame:
    """The events that parse, with every field in range and no clock far ahead, watermarked (not deduplicated)."""
    return (parsed(raw).where(accepted(s)).select("e.*")
            .withWatermark("event_time", _interval(s.watermark_ms)))


def dead_letters(raw: DataFrame, s: PlainSettings) -> DataFrame:
    """The refused rows: payload, a reason of our own, ingest time, key, offset."""
    e = F.col("e")
    reason = (F.when(e.isNull() | e["event_id"].isNull() & e["vehicle_id"].isNull(), "unparseable JSON")
              .when(e["vehicle_id"].isNull() | e["event_id"].isNull() | e["event_time"].isNull(), "missing field")
              .when(~F.col("ok"), "field out of range or not a number")
              .otherwise("event time ahead of ingest time"))
    return parsed(raw).where(~accepted(s)).select(
        F.col("value").alias("payload"), reason.alias("reason"), "ingest_time", "key", "offset")


def zone(lat: Column, lon: Column, zones: list[dict[str, str]]) -> Column:
    """CASE WHEN over the zones (first matching rectangle wins): a struct of zone_id, zone_name, speed_limit_kmh."""
    expr = None
    for z in zones:
        inside = _inside(lat, lon, z)
        found = F.struct(F.lit(z["zone_id"]).alias("zone_id"), F.lit(z["name"]).alias("zone_name"),
                         F.lit(float(z["speed_limit_kmh"])).alias("speed_limit_kmh"))
        expr = F.when(inside, found) if expr is None else expr.when(inside, found)
    return expr


def clean_events(raw: DataFrame, s: PlainSettings) -> DataFrame:
    """Valid events without re-sent copies, with their zone (zone_id, zone_name, speed_limit_kmh)."""
    events = valid_events(raw, s).dropDuplicatesWithinWatermark(["event_id"])
    return events.select("*", zone(F.col("lat"), F.col("lon"), load_zone_rows()).alias("z")).select(
        *EVENT_SCHEMA.fieldNames(), "z.*")


def _flat(windowed: DataFrame) -> DataFrame:
    return windowed.select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                           *[c for c in windowed.columns if c != "window"])


def windows(raw: DataFrame, s: PlainSettings) -> DataFrame:
    """Per-vehicle tumbling windows: events, average and max speed, events over the limit."""
    over = F.when(F.col("speed_kmh") > F.col("speed_limit_kmh"), 1).otherwise(0)
    return _flat(clean_events(raw, s).groupBy(F.window("event_time", _interval(s.window_ms)), "vehicle_id").agg(
        F.count(F.lit(1)).alias("events"), F.avg("speed_kmh").alias("avg_speed_kmh"),
        F.max("speed_kmh").alias("max_speed_kmh"), F.sum(over).cast("long").alias("over_limit_events")))


def sliding(raw: DataFrame, s: PlainSettings) -> DataFrame:
    """Per-vehicle sliding windows: events and average speed."""
    w = F.window("event_time", _interval(s.sliding_ms), _interval(s.slide_ms))
    return _flat(clean_events(raw, s).groupBy(w, "vehicle_id").agg(
        F.count(F.lit(1)).alias("events"), F.avg("speed_kmh").alias("avg_speed_kmh")))


def alerts(raw: DataFrame, s: PlainSettings) -> DataFrame:
    """One row per event faster than its zone's limit."""
    return clean_events(raw, s).where(F.col("speed_kmh") > F.col("speed_limit_kmh")).select(
        "event_id", "vehicle_id", "event_time", "speed_kmh", "speed_limit_kmh",
        F.round(F.col("speed_kmh") - F.col("speed_limit_kmh"), 1).alias("excess_kmh"),
        "zone_id", "zone_name", "lat", "lon")


def incidents(raw: DataFrame, s: PlainSettings) -> DataFrame:
    """Speeding incidents per vehicle (``Incidents``), each written when it closes."""
    pings = clean_events(raw, s).select("vehicle_id", "event_time", F.unix_millis("event_time").alias("event_ms"),
                                        "speed_kmh", "speed_limit_kmh", "lat", "lon", "zone_id")
    return pings.groupBy("vehicle_id").transformWithStateInPandas(
        statefulProcessor=Incidents(s.incident_after_ms, s.incident_timeout_ms), outputStructType=INCIDENT_SCHEMA,
        outputMode="Append", timeMode="EventTime")


def trips(raw: DataFrame, s: PlainSettings) -> DataFrame:
    """Trips per vehicle (``Trips``), each written once it can take no more pings."""
    pings = clean_events(raw, s).select("vehicle_id", "event_time", F.unix_micros("event_time").alias("event_us"),
                                        "lat", "lon", "speed_kmh")
    return pings.groupBy("vehicle_id").transformWithStateInPandas(
        statefulProcessor=Trips(s.trip_gap_ms * 1000, s.max_trip_ms * 1000), outputStructType=TRIP_SCHEMA,
        outputMode="Append", timeMode="EventTime")


def late(raw: DataFrame, s: PlainSettings) -> DataFrame:
    """The events Spark's stateful operators drop as late (``LateEvents``), before the dedup."""
    # event_ms, not event_time: a column carrying the watermark would make Spark drop the late rows first
    rows = valid_events(raw, s).select(F.lit(0).alias("all"), "event_id", "vehicle_id",
                                       F.unix_millis("event_time").alias("event_ms"), "speed_kmh", "lat", "lon")
    return rows.groupBy("all").transformWithStateInPandas(
        statefulProcessor=LateEvents(s.window_ms), outputStructType=LATE_SCHEMA, outputMode="Append",
        timeMode="EventTime")


BUILDERS = {"windows": windows, "sliding": sliding, "alerts": alerts, "dead-letters": dead_letters,
            "incidents": incidents, "trips": trips, "late": late}


def plain_outputs(raw: DataFrame, settings: PlainSettings | None = None,
                  outputs: Sequence[str] = OUTPUTS) -> dict[str, DataFrame]:
    """The fleet job's outputs in plain PySpark, by name, from RAW rows (a stream: call it once per
    query to read the source once per output).

    >>> plain_outputs(raw_stream(spark, URI))["alerts"].writeStream.format("noop").start()  # doctest: +SKIP
    """
    # Python workers cannot import this file (it is no package): its processors travel by value, as a
    # job script's own classes do
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return {name: BUILDERS[name](raw, settings or PlainSettings()) for name in outputs}


# --- the state processors ---------------------------------------------------------------------------

INCIDENT_SCHEMA = T.StructType([
    T.StructField("vehicle_id", T.StringType()), T.StructField("started_at", T.TimestampType()),
    T.StructField("ended_at", T.TimestampType()), T.StructField("duration_s", T.DoubleType()),
    T.StructField("zone_id", T.StringType()), T.StructField("max_speed_kmh", T.DoubleType()),
    T.StructField("max_excess_kmh", T.DoubleType()), T.StructField("distance_km", T.DoubleType()),
    T.StructField("pings", T.LongType()), T.StructField("status", T.StringType()),
    T.StructField("closed_by", T.StringType()), T.StructField("closed_at", T.TimestampType()),
    T.StructField("last_lat", T.DoubleType()), T.StructField("last_lon", T.DoubleType()),
])
TRIP_SCHEMA = T.StructType([
    T.StructField("vehicle_id", T.StringType()), T.StructField("trip_start", T.TimestampType()),
    T.StructField("trip_end", T.TimestampType()), T.StructField("duration_s", T.DoubleType()),
    T.StructField("pings", T.LongType(), False), T.StructField("distance_km", T.DoubleType()),
    T.StructField("avg_speed_kmh", T.DoubleType()), T.StructField("max_speed_kmh", T.DoubleType()),
])
LATE_SCHEMA = T.StructType([
    *EVENT_SCHEMA.fields, T.StructField("window_start", T.TimestampType()),
    T.StructField("window_end", T.TimestampType()), T.StructField("missed_watermark", T.TimestampType()),
    T.StructField("copies", T.LongType()),
])


def haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    a = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
    return 2 * 6371.0088 * math.asin(min(1.0, math.sqrt(a)))


def _frame(rows: list[tuple], schema: T.StructType, unit: str) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=schema.fieldNames())
    for f in schema.fields:
        if isinstance(f.dataType, T.TimestampType):
            df[f.name] = pd.to_datetime(df[f.name], unit=unit)
    return df


def _put(state, values: list[tuple]) -> None:
    """Replace a list state's values (Spark refuses an empty list: clear it instead)."""
    if values:
        state.put(values)
    else:
        state.clear()


class _PerVehicle(StatefulProcessor):
    """A processor keyed by vehicle: pings wait in a list state until the watermark passes them, then
    are applied in event-time order (so the result does not depend on how batches cut the stream);
    one event-time timer wakes the vehicle at the next moment it has something to do."""

    WAITING = ""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.waiting = handle.getListState("waiting", self.WAITING)
        self.timer = handle.getValueState("timer", "ms long")

    def _wake_at(self, due_ms: int | None, watermark_ms: int) -> None:
        """Keep one timer, at ``due_ms`` (a timer must lie after the watermark); None: none."""
        old = self.timer.get()[0] if self.timer.exists() else None
        due = None if due_ms is None else max(int(due_ms), watermark_ms + 1)
        if old is not None and old != due:
            self.handle.deleteTimer(old)
        if due is None:
            self.timer.clear()
        elif old != due:
            self.handle.registerTimer(due)
            self.timer.update((due,))

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        arrived = [p for df in rows for p in self._pings(df)]
        out = self._step(key[0], arrived, timerValues.getCurrentWatermarkInMs())
        if out:
            yield self._frame(out)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        self.timer.clear()  # Spark removed it as it fired
        out = self._step(key[0], [], timerValues.getCurrentWatermarkInMs())
        if out:
            yield self._frame(out)

    def close(self) -> None:
        pass


class Incidents(_PerVehicle):
    """A vehicle above its zone's limit for ``after_ms`` opens an incident; a ping at or under the limit
    closes it (``speed``), and so does silence longer than ``timeout_ms`` (``timeout``)."""

    WAITING = "t long, speed double, excess double, lat double, lon double, zone string"
    TRACK = ("last_ms long, last_lat double, last_lon double, seen_ms long, start_ms long, end_ms long, "
             "zone string, max_speed double, max_excess double, km double, pings long, opened boolean")
    FIELDS = [c.split()[0] for c in TRACK.split(", ")]

    def __init__(self, after_ms: int, timeout_ms: int):
        self.after_ms, self.timeout_ms = after_ms, timeout_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.track = handle.getValueState("track", self.TRACK)

    @staticmethod
    def _pings(df: pd.DataFrame) -> list[tuple]:
        excess = (df["speed_kmh"] - df["speed_limit_kmh"]).astype(float)
        return list(zip(df["event_ms"].astype("int64").tolist(), df["speed_kmh"].astype(float).tolist(),
                        excess.tolist(), df["lat"].tolist(), df["lon"].tolist(),
                        df["zone_id"].where(df["zone_id"].notna(), None).tolist()))

    def _frame(self, rows: list[tuple]) -> pd.DataFrame:
        return _frame(rows, INCIDENT_SCHEMA, "ms")

    def _step(self, vehicle: str, arrived: list[tuple], watermark_ms: int) -> list[tuple]:
        k = dict(zip(self.FIELDS, self.track.get())) if self.track.exists() else None
        if k is not None and k["last_ms"] is not None:
            arrived = [p for p in arrived if p[0] > k["last_ms"]]  # too late to be put in order
        if k is None and not arrived:
            return []
        k = k or dict.fromkeys(self.FIELDS)
        if arrived:
            k["seen_ms"] = max(k["seen_ms"] or 0, max(p[0] for p in arrived))
        waiting = sorted([*self.waiting.get(), *arrived], key=lambda p: p[0])
        out: list[tuple] = []
        for p in (p for p in waiting if p[0] <= watermark_ms):
            self._apply(vehicle, k, p, out)
        waiting = [p for p in waiting if p[0] > watermark_ms]
        if not waiting and watermark_ms >= k["seen_ms"] + self.timeout_ms:
            if k["opened"]:  # silent for the timeout: the ping that ends it never came
                out.append(self._incident(vehicle, k, "timeout", k["seen_ms"] + self.timeout_ms))
            self.track.clear()
            self.waiting.clear()
            self._wake_at(None, watermark_ms)
            return out
        self.track.update(tuple(k[f] for f in self.FIELDS))
        _put(self.waiting, waiting)
        self._wake_at(waiting[0][0] if waiting else k["seen_ms"] + self.timeout_ms, watermark_ms)
        return out

    def _apply(self, vehicle: str, k: dict, p: tuple, out: list[tuple]) -> None:
        t, speed, excess, lat, lon, zone_id = p
        step = 0.0
        if k["last_ms"] is not None:
            if t - k["last_ms"] > self.timeout_ms:  # a silence ends any run
                if k["opened"]:
                    out.append(self._incident(vehicle, k, "timeout", k["last_ms"] + self.timeout_ms))
                self._end_run(k)
            else:
                step = haversine_km(k["last_lat"], k["last_lon"], lat, lon)
        if excess > 0:
            if k["start_ms"] is None:
                k.update(start_ms=t, zone=zone_id, km=0.0, pings=0, max_speed=-math.inf, max_excess=-math.inf)
            else:
                k["km"] += step
            k["pings"] += 1
            k["max_speed"], k["max_excess"] = max(k["max_speed"], speed), max(k["max_excess"], excess)
            k["end_ms"] = t
            k["opened"] = t - k["start_ms"] >= self.after_ms
        elif k["start_ms"] is not None:
            if k["opened"]:
                out.append(self._incident(vehicle, k, "speed", t))
            self._end_run(k)
        k["last_ms"], k["last_lat"], k["last_lon"] = t, lat, lon

    @staticmethod
    def _end_run(k: dict) -> None:
        k.update(start_ms=None, end_ms=None, zone=None, max_speed=None, max_excess=None, km=None, pings=None,
                 opened=None)

    @staticmethod
    def _incident(vehicle: str, k: dict, closed_by: str, closed_at: int) -> tuple:
        return (vehicle, k["start_ms"], k["end_ms"], (k["end_ms"] - k["start_ms"]) / 1000.0, k["zone"],
                k["max_speed"], k["max_excess"], k["km"], k["pings"], "closed", closed_by, closed_at,
                k["last_lat"], k["last_lon"])


class Trips(_PerVehicle):
    """A trip goes on while each ping comes at most ``gap_us`` after the one before, within the same
    multiple of ``max_trip_us`` since the epoch; it is written once the watermark reaches its last ping
    plus the gap."""

    WAITING = "t long, lat double, lon double, speed double"
    OPEN = "start long, last long, lat double, lon double, pings long, speed_sum double, speed_max double, km double"

    def __init__(self, gap_us: int, max_trip_us: int):
        self.gap_us, self.max_trip_us = gap_us, max_trip_us

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.open = handle.getListState("open", self.OPEN)

    @staticmethod
    def _pings(df: pd.DataFrame) -> list[tuple]:
        return list(zip(df["event_us"].astype("int64").tolist(), df["lat"].tolist(), df["lon"].tolist(),
                        df["speed_kmh"].astype(float).tolist()))

    def _frame(self, rows: list[tuple]) -> pd.DataFrame:
        df = _frame(rows, TRIP_SCHEMA, "us")
        df["pings"] = df["pings"].astype("int64")
        return df

    def _step(self, vehicle: str, arrived: list[tuple], watermark_ms: int) -> list[tuple]:
        trips = [list(t) for t in self.open.get()]
        if trips:
            arrived = [p for p in arrived if p[0] > trips[-1][1]]  # too late to be put in order
        waiting = sorted([*self.waiting.get(), *arrived], key=lambda p: p[:3])
        watermark_us = watermark_ms * 1000
        for p in (p for p in waiting if p[0] <= watermark_us):
            self._apply(trips, p)
        waiting = [p for p in waiting if p[0] > watermark_us]
        done = [t for t in trips if t[1] + self.gap_us <= watermark_us]
        trips = [t for t in trips if t[1] + self.gap_us > watermark_us]
        out = [(vehicle, t[0], t[1], (t[1] - t[0]) / 1e6, t[4], t[7], t[5] / t[4], t[6]) for t in done]
        if not trips and not waiting:
            self.open.clear()
            self.waiting.clear()
            self._wake_at(None, watermark_ms)
            return out
        _put(self.open, [tuple(t) for t in trips])
        _put(self.waiting, waiting)
        due_us = min([t[1] + self.gap_us for t in trips] + [p[0] for p in waiting[:1]])
        self._wake_at(-(-due_us // 1000), watermark_ms)
        return out

    def _apply(self, trips: list[list], p: tuple) -> None:
        t, lat, lon, speed = p
        last = trips[-1] if trips else None
        if last is None or t - last[1] > self.gap_us or t // self.max_trip_us != last[1] // self.max_trip_us:
            last = [t, t, lat, lon, 0, 0.0, -math.inf, 0.0]
            trips.append(last)
        else:
            last[7] += haversine_km(last[2], last[3], lat, lon)
        last[1], last[2], last[3] = t, lat, lon
        last[4] += 1
        last[5] += speed
        last[6] = max(last[6], speed)


class LateEvents(StatefulProcessor):
    """Under one key, so that it runs in every batch: the rows at or before the previous batch's
    watermark, which is what Spark's stateful operators drop as late. A timer a millisecond past the
    watermark wakes it whenever the watermark moves, so that it always knows the previous one."""

    def __init__(self, window_ms: int):
        self.window_ms = window_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.previous = handle.getValueState("previous_watermark", "ms long")

    def _note(self, watermark_ms: int) -> None:
        self.previous.update((watermark_ms,))
        for t in list(self.handle.listTimers()):
            if t != watermark_ms + 1:
                self.handle.deleteTimer(t)
        self.handle.registerTimer(watermark_ms + 1)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        before = self.previous.get()[0] if self.previous.exists() else None
        # every frame is read, even in the first batch, where nothing can be late yet
        frames = [df[df["event_ms"] <= before] for df in rows if before is not None]
        self._note(timerValues.getCurrentWatermarkInMs())
        late = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        if not late.empty:
            yield self._rows(late, before)

    def _rows(self, late: pd.DataFrame, missed_ms: int) -> pd.DataFrame:
        copies = late.groupby("event_id", sort=False)["event_id"].transform("size").astype("int64")
        late = late.assign(copies=copies).drop_duplicates("event_id", ignore_index=True)
        ms = late["event_ms"].astype("int64")
        start = ms - ms % self.window_ms
        return pd.DataFrame({
            "event_id": late["event_id"], "vehicle_id": late["vehicle_id"], "event_time": pd.to_datetime(ms, unit="ms"),
            "speed_kmh": late["speed_kmh"], "lat": late["lat"], "lon": late["lon"],
            "window_start": pd.to_datetime(start, unit="ms"), "window_end": pd.to_datetime(start + self.window_ms, unit="ms"),
            "missed_watermark": pd.to_datetime([missed_ms] * len(late), unit="ms"), "copies": late["copies"],
        })

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        self._note(timerValues.getCurrentWatermarkInMs())
        return iter([])

    def close(self) -> None:
        pass
