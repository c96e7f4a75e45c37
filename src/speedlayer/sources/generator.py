"""``generator://`` — synthetic events computed in the JVM from a paced sequence of numbers.

The sequence is Spark's rate source (whole seconds at a time), or with ``max_per_batch`` a
sequence paced to the millisecond with admission control (``generator_pacing``).

Event ``n`` is a pure function of (seed, n, start, rate): the same seed gives the same events in
every query, after a restart, and in ``read_batch`` (``spark.range``), which is what lets tests
recompute a stream's results in batch. What an event is comes from its kind (``kind=``, a plug-in
of ``speedlayer.sources.generator_kinds``; by default the fleet's vehicle pings,
``speedlayer.pipelines.fleet.vehicle_kind``); options add disorder, late events, re-sent
duplicates and corrupted payloads.

    generator://?rate=5000&vehicles=2000&seed=7&disorder=2s&late=0.005&duplicates=0.01&malformed=0.002
"""

from __future__ import annotations

import json
import time
from collections.abc import MutableMapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from speedlayer.core.errors import ConfigError
from speedlayer.core.uris import Uri, parse_options, parse_uri
from speedlayer.sources.base import Source, count_behind, newest_offsets
from speedlayer.sources.generator_kinds import kinds
from speedlayer.sources.generator_kit import GeneratorOptions, options_of, own_options
from speedlayer.sources.generator_pacing import FORMAT as PACED
from speedlayer.sources.generator_pacing import PacedSequence


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


def parse_generator_options(options: dict[str, Any]) -> GeneratorOptions:
    """``generator://``'s options, validated by its kind's options model (``kind_options``).

    >>> parse_generator_options({"kind": "vehicles", "vehicles": "50"}).vehicles
    50
    >>> parse_generator_options({"kind": "actions", "vehicles": "50"})
    Traceback (most recent call last):
    speedlayer.core.errors.ConfigError: generator:// (kind=actions) has no option 'vehicles'; known options: ...
    """
    kind = options.get("kind", GeneratorOptions.model_fields["kind"].default)
    found = kinds()
    if kind not in found:  # refused as an option, before the options only its kind would take
        return parse_options(GeneratorOptions, {"kind": kind}, f"generator:// (kind={kind})")
    return parse_options(options_of(found[kind]), options, f"generator:// (kind={kind})")


def generate(seq: DataFrame, opts: GeneratorOptions, start_ms: int) -> DataFrame:
    """RAW rows of the options' kind (a registered one: ``speedlayer.sources.generator_kinds``) for the
    sequence numbers in ``seq`` (column ``n``)."""
    return kinds()[opts.kind](seq, opts, start_ms)


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
        self.options: GeneratorOptions = parse_generator_options(uri.options)
        self.start_ms: int | None = parse_start(self.options.start) if self.options.start else None
        self._chose_start = False  # pin() chose the clock (nothing given, nothing recorded): pin_at_start may move it
        self._started_now = False  # pin_at_start moved the clock: the run's queries start from it

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
        self._started_now = True
        self.start_ms = run_state["generator_start_ms"] = _now_ms()
        return True

    def prepare_checkpoint(self, checkpoint: Path, reads: list[str]) -> None:
        # Spark's rate source paces row n from its own start, taken when a query first plans a batch
        # (seconds after the clock was pinned: the plan is built and analysed first) unless its
        # checkpoint records one. Recording the clock makes row n readable at its ingest time.
        if not self._started_now or reads != ["rate"] or self.options.max_per_batch:  # paced: the clock is in its spec
            return
        recorded = checkpoint / "sources" / "0" / "0"
        if not recorded.exists():
            recorded.parent.mkdir(parents=True, exist_ok=True)
            recorded.write_text(f"v1\n{self.start_ms}")

    def check_checkpoint(self, checkpoint: Path) -> None:
        # the paced reader's offsets are {"n": rows}, Spark's rate source's a number of seconds
        recorded = newest_offsets(checkpoint)
        paced, rate = any(isinstance(o, dict) and set(o) == {"n"} for o in recorded), any(isinstance(o, int) for o in recorded)
        if (paced and not self.options.max_per_batch) or (rate and not paced and self.options.max_per_batch):
            was = "with" if paced else "without"
            raise ConfigError(f"generator://: the checkpoint {checkpoint} was written {was} max_per_batch: run with the "
                              "option as it was, or give a new --state-dir")

    def default_input(self, name: str) -> str | None:
        # the same generator (seed, rate, and the options both kinds take) making the stream's kind, if it makes it
        return self._as_kind({"kind": name}) if name in kinds() else None

    def complete_input(self, name: str, uri: str) -> str:
        # a second generator stream given in part takes the rest from this one, as it would given none
        given = parse_uri(uri, "source URI")
        if given.scheme != "generator" or name not in kinds():
            return uri
        return self._as_kind({"kind": name, **given.options})

    def _as_kind(self, given: dict[str, str]) -> str:
        """This generator's URI for another kind: ``given``'s options over the ones of this URI that kind takes."""
        found = kinds()
        taken = options_of(found[given["kind"]]).model_fields if given["kind"] in found else {}
        return "generator://?" + urlencode({**{k: v for k, v in self.uri.options.items() if k in taken}, **given}, safe=":")

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
        own = "".join(f", {name}={value}" for name, value in own_options(o).items())
        return f"generator ({o.kind}, seed={o.seed}, rate={o.rate}/s{own}, start={start})"

    def _start(self) -> int:
        if self.start_ms is None:
            self.start_ms = _now_ms()
        return self.start_ms

    def limit_partitions(self, partitions: int) -> None:
        if self.options.partitions is None or self.options.partitions > partitions:
            self.options = self.options.model_copy(update={"partitions": partitions})

    def read_stream(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        return self._stream(spark, max_events, self.options.max_per_batch)

    def view_stream(self, spark: SparkSession, max_events: int | None = None, batches: int = 1) -> DataFrame:
        """The paced sequence at most ``batches`` × ``max_per_batch`` rows a batch."""
        cap = self.options.max_per_batch
        return self._stream(spark, max_events, cap * batches if cap else None)

    def _stream(self, spark: SparkSession, max_events: int | None, cap: int | None) -> DataFrame:
        o = self.options
        seq = self._paced(spark, max_events, cap) if o.max_per_batch else self._rate(spark)
        if max_events is not None:
            seq = seq.where(F.col("n") < max_events)
        return generate(seq, o, self._start())

    def check_trigger(self, kind: str) -> None:
        if not self.options.max_per_batch:
            return
        if kind == "continuous":
            raise ConfigError("generator option max_per_batch bounds micro-batches: drop it with --trigger continuous")
        if kind == "once":
            raise ConfigError("generator option max_per_batch: --trigger once reads everything due in one batch "
                              "(Spark ignores read limits there): use --trigger available-now")

    def _paced(self, spark: SparkSession, max_events: int | None, cap: int | None) -> DataFrame:
        o = self.options
        spec = {"start_ms": self._start(), "rate": o.rate, "max_per_batch": cap, "until": max_events,
                "partitions": o.partitions or spark.sparkContext.defaultParallelism}
        spark.dataSource.register(PacedSequence)
        return spark.readStream.format(PACED).option("spec", json.dumps(spec)).load()

    def _rate(self, spark: SparkSession) -> DataFrame:
        o = self.options
        if o.rows_per_batch:
            reader = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", o.rows_per_batch)
        else:
            reader = spark.readStream.format("rate").option("rowsPerSecond", o.rate)
        if o.partitions:
            reader = reader.option("numPartitions", o.partitions)
        return reader.load().select(F.col("value").alias("n"))

    def read_batch(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        if max_events is None:
            raise ConfigError("a batch read of the generator needs a number of events (--max-events)")
        seq = spark.range(0, max_events, numPartitions=self.options.partitions or spark.sparkContext.defaultParallelism)
        return generate(seq.select(F.col("id").alias("n")), self.options, self._start())

    def batch_rows(self, interval_ms: int) -> int | None:
        o = self.options
        if o.rows_per_batch:
            return o.rows_per_batch
        paced = o.rate * interval_ms // 1000 if interval_ms else None
        if o.max_per_batch is None:
            return paced
        return o.max_per_batch if paced is None else min(paced, o.max_per_batch)

    def events_read(self, progress_source: dict) -> int | None:
        end = progress_source.get("endOffset")
        if end is None:
            return None
        if isinstance(end, str):
            end = json.loads(end)
        if isinstance(end, dict):  # paced: {"n": rows}; rate-micro-batch: {"offset": rows, "timestamp": ...}
            return int(end["n"] if "n" in end else end["offset"])
        return int(end) * self.options.rate  # rate: seconds since the query began

    def lag(self, progress_source: dict) -> int | None:
        """With ``max_per_batch``: events due that no batch has read yet (``latestOffset`` - ``endOffset``);
        None otherwise (Spark's rate source reports no latest offset)."""
        return count_behind(progress_source, "n") if self.options.max_per_batch else None
