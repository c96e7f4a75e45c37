"""``speedlayer produce``: publish the generator's events to Redis Streams, a landing directory or Kafka.

Event *n* is computed in the JVM by the same expressions as ``generator://`` (``generate``
over ``spark.range(a, b)``), so with the same options and the same pinned ``start`` the payloads
are byte for byte what the generator would stream. Chunks are computed one ahead in a background
thread, collected as Arrow, cut into slices and written at ``--rate`` events/s (0: unpaced).

    speedlayer produce --to 'redis://localhost:6379/0?stream=vehicles&shards=4' --rate 5000 --max-events 100000
    speedlayer produce --to 'redis://localhost:6379/0?stream=rides' --kind rides --rate 50 --seed 7 --start 2026-11-22T10:00:00Z
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from urllib.parse import urlencode

from pydantic import BaseModel, Field

from speedlayer.core.errors import ConfigError
from speedlayer.core.uris import parse_uri
from speedlayer.producers import Destination, EventSlice, open_destination
from speedlayer.producers.files import FilesDestination
from speedlayer.sources.generator import GeneratorOptions, GeneratorSource, parse_start
from speedlayer.sources.generator_kinds import kinds


class ProduceSettings(BaseModel):
    """Everything ``speedlayer produce`` needs."""

    to: str
    generator: str = "generator://"
    rate: int | None = Field(None, ge=0, description="events/s; 0 = as fast as possible; default: the generator's rate")
    max_events: int | None = Field(None, gt=0, description="stop after this many events (default: until Ctrl-C)")
    from_event: int = Field(0, ge=0, description="first event number n")
    seed: int | None = None
    kind: str | None = Field(None, description="what to generate (vehicles, actions, transactions, labels, rides or a "
                                               "registered kind); wins over --generator's")
    start: str | None = Field(None, description="event-time origin (ISO-8601 or epoch ms); default: now")
    chunk: int = Field(50_000, gt=0, le=5_000_000, description="events computed per Spark job")
    master: str = "local[*]"


@dataclass
class ProducePlan:
    destination: Destination
    options: GeneratorOptions
    start_ms: int
    pace: int  # events/s, 0 = unpaced
    first: int
    end: int | None  # exclusive
    chunk: int

    @property
    def total(self) -> int | None:
        return None if self.end is None else self.end - self.first

    def generator_uri(self) -> str:
        """The ``generator://`` URI whose event n equals event n published here.

        >>> plan_produce(ProduceSettings(to="files:///tmp/x", seed=7, start="0")).generator_uri()
        'generator://?rate=5000&seed=7&start=1970-01-01T00:00:00Z'
        """
        o = self.options
        reading = {"partitions", "rows_per_batch", "max_per_batch"}  # how a query reads, not what the events are
        changed = o.model_dump(exclude_defaults=True, exclude={"rate", "seed", "start", *reading})
        query = {"rate": o.rate, "seed": o.seed, "start": iso_millis(self.start_ms), **changed}
        return "generator://?" + urlencode(query, safe=":")


def iso_millis(epoch_ms: int) -> str:
    """ISO-8601 UTC text of epoch milliseconds, ``Z``-suffixed, milliseconds only when not zero.

    >>> iso_millis(1795340400250)
    '2026-11-22T09:40:00.250Z'
    """
    moment = datetime.fromtimestamp(epoch_ms / 1000, timezone.utc)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{epoch_ms % 1000:03d}Z" if epoch_ms % 1000 else "Z")


def _default_start_ms(pace: int, end: int | None, rate: int) -> int:
    """Now; unpaced and bounded, the span of the events before now, so that no event time runs
    ahead of the broker's clock (a job refuses events ahead of their ingest time)."""
    now_ms = int(time.time()) * 1000
    if pace or end is None:
        return now_ms
    return now_ms - (end * 1000 + rate - 1) // rate - 1000


def plan_produce(settings: ProduceSettings) -> ProducePlan:
    """Validate the settings and pin the event-time origin, without Spark or the network.

    >>> plan_produce(ProduceSettings(to="files:///tmp/landing", rate=100, max_events=10)).pace
    100
    """
    destination = open_destination(settings.to)
    uri = parse_uri(settings.generator, "--generator URI")
    if uri.scheme != "generator":
        raise ConfigError(f"--generator takes a generator:// URI, e.g. 'generator://?seed=7&vehicles=500', not {uri.display!r}")
    updates: dict = {}
    if settings.seed is not None:
        updates["seed"] = settings.seed
    if settings.kind is not None:
        if settings.kind not in kinds():
            raise ConfigError(f"--kind {settings.kind!r} is not a kind the generator makes: choose one of {', '.join(kinds())}")
        updates["kind"] = settings.kind  # validated with its options: a kind has options of its own
    if settings.rate and "rate" not in uri.options:
        updates["rate"] = settings.rate  # event times then follow the publishing pace
    merged = {**uri.options, **{k: str(v) for k, v in updates.items()}}
    options = GeneratorSource(replace(uri, options=merged)).options  # options only, each valid for the kind
    pace = options.rate if settings.rate is None else settings.rate
    end = settings.from_event + settings.max_events if settings.max_events else None
    start_text = settings.start or options.start
    start_ms = parse_start(start_text) if start_text else _default_start_ms(pace, end, options.rate)
    options = options.model_copy(update={"start": str(start_ms)})
    if isinstance(destination, FilesDestination):
        destination.name_files(options.seed, start_ms)
    return ProducePlan(destination, options, start_ms, pace, settings.from_event, end, settings.chunk)


def compute_chunk(spark, plan: ProducePlan, first: int, end: int):
    """Events ``first`` … ``end - 1`` as an Arrow table (value, key, n), in event order."""
    from pyspark.sql import functions as F

    from speedlayer.sources.generator import generate

    seq = spark.range(first, end, numPartitions=spark.sparkContext.defaultParallelism).select(F.col("id").alias("n"))
    df = generate(seq, plan.options, plan.start_ms)
    table = df.select("value", "key", F.col("offset").cast("long").alias("n")).toArrow()
    return table.sort_by("n")


def _chunks(spark, plan: ProducePlan, stop: threading.Event) -> Iterator[tuple[int, object]]:
    """Computed chunks, the next one computed in the background while the current one is written."""
    ready: queue.Queue = queue.Queue(maxsize=1)

    def put(item) -> None:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def work() -> None:
        try:
            first = plan.first
            while not stop.is_set() and (plan.end is None or first < plan.end):
                end = first + plan.chunk if plan.end is None else min(first + plan.chunk, plan.end)
                put((first, compute_chunk(spark, plan, first, end)))
                first = end
            put(None)
        except BaseException as exc:  # noqa: BLE001 — handed to the consumer
            put(exc)

    threading.Thread(target=work, name="speedlayer-produce-compute", daemon=True).start()
    while True:
        item = ready.get()
        if item is None:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


def _slices(first: int, table, size: int | None) -> Iterator[EventSlice]:
    import pyarrow as pa

    values = table.column("value").cast(pa.binary()).to_pylist()
    keys = table.column("key").cast(pa.binary()).to_pylist()
    size = size or len(values)
    for i in range(0, len(values), size):
        yield EventSlice(first + i, values[i:i + size], keys[i:i + size])


@dataclass
class ProduceSummary:
    events: int
    first: int
    elapsed_s: float  # from the first write to the end
    startup_s: float  # computing the first chunk, before the first write
    stopped_by: str

    @property
    def rate(self) -> float:
        return self.events / self.elapsed_s if self.elapsed_s > 0 else 0.0


def produce(spark, plan: ProducePlan, on_progress: Callable[[int, float], None] | None = None,
            stop: threading.Event | None = None) -> ProduceSummary:
    """Publish the planned events; ``on_progress(events so far, seconds since the first write)`` after every slice.

    >>> summary = produce(spark, plan_produce(ProduceSettings(to="files:///tmp/l", rate=0, max_events=1000)))  # doctest: +SKIP
    """
    stop = stop or threading.Event()
    destination = plan.destination
    size = max(1, int(plan.pace * destination.paced_slice_s)) if plan.pace else destination.max_slice
    sent, stopped_by = 0, "end of input"
    destination.open()
    started = time.monotonic()
    writing_from: float | None = None  # the pace starts with the first write, not with Spark's first job
    try:
        for first, table in _chunks(spark, plan, stop):
            for events in _slices(first, table, size):
                writing_from = writing_from or time.monotonic()
                if plan.pace:
                    delay = writing_from + sent / plan.pace - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                destination.write(events)
                sent += len(events)
                if on_progress:
                    on_progress(sent, time.monotonic() - writing_from)
    except KeyboardInterrupt:
        stopped_by = "Ctrl-C"
    finally:
        stop.set()
        destination.close()
    ended = time.monotonic()
    writing_from = writing_from or ended
    return ProduceSummary(sent, plan.first, ended - writing_from, writing_from - started, stopped_by)
