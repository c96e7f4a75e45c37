"""``generator://`` — synthetic vehicle telemetry computed in the JVM from Spark's rate source.

Event ``n`` is a pure function of (seed, n, start, rate): the same seed gives the same events in
every query, after a restart, and in ``read_batch`` (``spark.range``), which is what lets tests
recompute a stream's results in batch. Vehicles drive circles around Berlin's centre at speeds
that follow each zone's limit, about 3% of them speeding; options add disorder, late events,
re-sent duplicates and corrupted payloads.

    generator://?rate=5000&vehicles=2000&seed=7&disorder=2s&late=0.005&duplicates=0.01&malformed=0.002
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import MutableMapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlencode

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from speedlayer.core.durations import parse_duration
from speedlayer.core.errors import ConfigError
from speedlayer.core.uris import Uri, parse_options
from speedlayer.core.zones import zone_of
from speedlayer.sources.base import Source
from speedlayer.sources.generator_kinds import kinds
from speedlayer.sources.generator_kit import GeneratorOptions, iso_time, metadata, uniform

CENTER_LAT, CENTER_LON = 52.5200, 13.4050
_KM_PER_DEG_LAT = 111.32
#: km per degree of longitude at the centre (east-west distances of the vehicles' paths and the pickups)
_KM_PER_DEG_LON = _KM_PER_DEG_LAT * math.cos(math.radians(CENTER_LAT))
_MALFORMED_KINDS = 7


def parse_start(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 time or of a number of epoch milliseconds."""
    if text.strip().lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"generator option 'start': {text!r} is neither ISO-8601 nor epoch milliseconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def generate(seq: DataFrame, opts: GeneratorOptions, start_ms: int) -> DataFrame:
    """RAW rows of the options' kind (a registered one: ``speedlayer.sources.generator_kinds``) for the
    sequence numbers in ``seq`` (column ``n``)."""
    return kinds()[opts.kind](seq, opts, start_ms)


def vehicle_path(df: DataFrame, seed: int, start_ms: int) -> DataFrame:
    """``df`` with where each vehicle is at each time: ``lat`` and ``lon`` from columns ``vehicle`` and ``event_ms``.

    A vehicle drives a circle around the centre (its radius, direction, cruise speed and phase are
    stable per seed and vehicle); ``wave`` is the speed's periodic swing. Ride requests use it to
    put pickups where the vehicles of the same seed are.

    >>> vehicle_path(spark.range(1).selectExpr("id AS vehicle", "0L AS event_ms"), 42, 0)  # doctest: +SKIP
    """
    c = F.col

    def trait(salt: int) -> Column:  # per-vehicle, stable over time
        return uniform(seed + 1, c("vehicle"), salt)

    df = df.select(
        "*",
        (1.0 + 14.0 * trait(1)).alias("radius_km"),
        F.when(trait(2) < 0.5, -1.0).otherwise(1.0).alias("direction"),
        (25.0 + 35.0 * trait(3)).alias("cruise_kmh"),
        (60.0 + 240.0 * trait(4)).alias("period_s"),
        (2 * math.pi * trait(5)).alias("phase"),
        (2 * math.pi * trait(6)).alias("angle0"),
        # About 3% of vehicles speed; the rest stay mostly below the local limit.
        F.when(trait(7) < 0.03, 1.12 + 0.3 * trait(8)).otherwise(0.62 + 0.3 * trait(8)).alias("habit"),
    )
    t_s = (c("event_ms") - F.lit(start_ms)) / 1000.0
    df = df.select("*", (2 * math.pi * t_s / c("period_s") + c("phase")).alias("wave"), t_s.alias("t_s"))
    # distance = integral of cruise * (1 + 0.3 sin(wave)) dt, in km
    distance_km = c("cruise_kmh") / 3600.0 * (c("t_s") - 0.3 * c("period_s") / (2 * math.pi) * F.cos(c("wave")))
    df = df.select("*", (c("angle0") + c("direction") * distance_km / c("radius_km")).alias("angle"))
    df = df.select(
        "*",
        F.round(F.lit(CENTER_LAT) + c("radius_km") / _KM_PER_DEG_LAT * F.sin(c("angle")), 6).alias("lat"),
        F.round(F.lit(CENTER_LON) + c("radius_km") / _KM_PER_DEG_LON * F.cos(c("angle")), 6).alias("lon"),
    )
    return df


def vehicle_events(seq: DataFrame, opts: GeneratorOptions, start_ms: int) -> DataFrame:
    """RAW rows for a DataFrame of sequence numbers ``n`` (long).

    Built as a chain of projections, each naming its results, so that no expression is copied
    into the next (nesting them would grow the plan exponentially).

    >>> vehicle_events(spark.range(3).withColumnRenamed("id", "n"), GeneratorOptions(), 0)  # doctest: +SKIP
    """
    seed = opts.seed
    c = F.col
    src = c("src")
    df = vehicle_path(_event_times(seq, opts, start_ms), seed, start_ms)
    df = df.select("*", zone_of(c("lat"), c("lon"))[2].alias("limit"))
    noise = (uniform(seed, src, 6) - 0.5) * 4
    df = df.select(
        "*",
        F.round(F.greatest(F.lit(0.0), c("limit") * c("habit") * (1 + 0.12 * F.sin(c("wave"))) + noise), 1).alias("speed"),
        iso_time(c("event_ms")).alias("event_time_text"),
    )

    fields = {
        "event_id": F.format_string("e-%06d", src),
        "vehicle_id": F.format_string("V%04d", c("vehicle")),
        "event_time": c("event_time_text"),
        "speed_kmh": c("speed"),
        "lat": c("lat"),
        "lon": c("lon"),
    }

    good = F.to_json(F.struct(*(col.alias(name) for name, col in fields.items())))
    if opts.malformed == 0:
        return df.select(good.alias("value"), *metadata(opts, start_ms, F.format_string("V%04d", c("vehicle"))))
    df = df.select(
        "*", good.alias("good"),
        (uniform(seed, src, 7) < opts.malformed).alias("bad"),
        F.floor(uniform(seed, src, 8) * _MALFORMED_KINDS).alias("kind"),
    )
    return df.select(F.when(c("bad"), _corrupted(c("good"))).otherwise(c("good")).alias("value"),
                     *metadata(opts, start_ms, F.format_string("V%04d", c("vehicle"))))


def _event_times(seq: DataFrame, opts: GeneratorOptions, start_ms: int) -> DataFrame:
    """``n``, the event it sends (``src``: itself, or an earlier one re-sent), its event time and vehicle."""
    seed, c = opts.seed, F.col
    # A duplicate re-sends one of the three events before it, byte for byte.
    is_dup = (uniform(seed, c("n"), 1) < opts.duplicates) & (c("n") > 0)
    df = seq.select(
        "n",
        F.when(is_dup, F.greatest(c("n") - 1 - F.floor(uniform(seed, c("n"), 2) * 3), F.lit(0)))
        .otherwise(c("n")).cast("long").alias("src"),
    )
    src = c("src")
    lateness_ms = F.when(
        uniform(seed, src, 3) < opts.late,
        F.floor(F.lit(parse_duration(opts.late_delay)) * (0.5 + uniform(seed, src, 4))),
    ).otherwise(0)
    return df.select(
        "n", "src",
        (F.lit(start_ms) + F.floor(src * (1000.0 / opts.rate))
         - F.floor(uniform(seed, src, 5) * parse_duration(opts.disorder))
         - lateness_ms).cast("long").alias("event_ms"),
        F.pmod(src, F.lit(opts.vehicles)).alias("vehicle"),
    )


def _corrupted(good_col: Column) -> Column:
    """A malformed payload of the ``kind`` drawn for the row, made from its good payload ``good_col``.

    Corruptions are string edits of the good payload: five more to_json serialisers would grow
    this stage's generated code past HotSpot's 8000-byte JIT limit.
    """
    c = F.col

    def with_field(name: str, json_value: str) -> Column:
        return F.regexp_replace(good_col, f'"{name}":[^,}}]*', f'"{name}":{json_value}')

    return (
        F.when(c("kind") == 0, F.expr("substring(good, 1, int(length(good) / 2))"))
        .when(c("kind") == 1, F.regexp_replace(good_col, '"vehicle_id":"[^"]*",', ""))
        .when(c("kind") == 2, with_field("speed_kmh", "999.9"))
        .when(c("kind") == 3, with_field("lat", "123.456"))
        .when(c("kind") == 4, with_field("speed_kmh", '"fast"'))
        .when(c("kind") == 5, F.replace(good_col, c("event_time_text"), iso_time(c("event_ms") + 172_800_000)))
        .otherwise(F.concat(F.lit("#garbage "), c("src").cast("string")))
    )


def _now_ms() -> int:
    return int(time.time() * 1000)


class GeneratorSource(Source):
    """``generator://?rate=...&vehicles=...&seed=...`` (see module docstring for every option)."""

    scheme = "generator"
    summary = "simulated fleet pings (or rides, app actions, transactions), paced and seeded"
    supports_continuous = True

    def __init__(self, uri: Uri):
        super().__init__(uri)
        if uri.path not in ("", "/") or uri.host:
            raise ConfigError(f"{uri.display}: the generator takes options only, e.g. generator://?rate=1000&seed=7")
        self.options: GeneratorOptions = parse_options(GeneratorOptions, uri.options, "generator://")
        self.start_ms: int | None = parse_start(self.options.start) if self.options.start else None
        self._chose_start = False  # pin() chose the clock (nothing given, nothing recorded): pin_at_start may move it

    def pin(self, run_state: MutableMapping[str, Any]) -> None:
        if self.start_ms is None:
            recorded = run_state.get("generator_start_ms")
            self._chose_start = recorded is None
            self.start_ms = int(recorded) if recorded is not None else _now_ms()
        run_state["generator_start_ms"] = self.start_ms

    def pin_at_start(self, run_state: MutableMapping[str, Any]) -> bool:
        # Spark's rate source emits event n at its own start + n / rate: a clock chosen before Spark
        # started would put every event seconds in the past (the run's latency since the event).
        if not self._chose_start:
            return False
        self._chose_start = False
        self.start_ms = run_state["generator_start_ms"] = _now_ms()
        return True

    def default_input(self, name: str) -> str | None:
        # the same generator (seed, rate, vehicles) making the stream's kind, when it makes that kind
        if name not in kinds():
            return None
        return "generator://?" + urlencode({**self.uri.options, "kind": name}, safe=":")

    def clock(self) -> int | None:
        return self.start_ms

    def follow_clock(self, clock_ms: int) -> bool:
        if self.options.start:
            return False
        self.start_ms = clock_ms
        return True

    def describe(self) -> str:
        o = self.options
        start = datetime.fromtimestamp((self.start_ms or 0) / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        vehicles = f", vehicles={o.vehicles}" if o.kind in ("vehicles", "rides") else ""
        return f"generator ({o.kind}, seed={o.seed}, rate={o.rate}/s{vehicles}, start={start})"

    def _start(self) -> int:
        if self.start_ms is None:
            self.start_ms = _now_ms()
        return self.start_ms

    def limit_partitions(self, partitions: int) -> None:
        if self.options.partitions is None or self.options.partitions > partitions:
            self.options = self.options.model_copy(update={"partitions": partitions})

    def read_stream(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        o = self.options
        if o.rows_per_batch:
            reader = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", o.rows_per_batch)
        else:
            reader = spark.readStream.format("rate").option("rowsPerSecond", o.rate)
        if o.partitions:
            reader = reader.option("numPartitions", o.partitions)
        seq = reader.load().select(F.col("value").alias("n"))
        if max_events is not None:
            seq = seq.where(F.col("n") < max_events)
        return generate(seq, o, self._start())

    def read_batch(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        if max_events is None:
            raise ConfigError("a batch read of the generator needs a number of events (--max-events)")
        seq = spark.range(0, max_events, numPartitions=self.options.partitions or spark.sparkContext.defaultParallelism)
        return generate(seq.select(F.col("id").alias("n")), self.options, self._start())

    def batch_rows(self, interval_ms: int) -> int | None:
        if self.options.rows_per_batch:
            return self.options.rows_per_batch
        return self.options.rate * interval_ms // 1000 if interval_ms else None

    def events_read(self, progress_source: dict) -> int | None:
        end = progress_source.get("endOffset")
        if end is None:
            return None
        if isinstance(end, str):
            end = json.loads(end)
        if isinstance(end, dict):  # rate-micro-batch: {"offset": rows, "timestamp": ...}
            return int(end["offset"])
        return int(end) * self.options.rate  # rate: seconds since the query began
