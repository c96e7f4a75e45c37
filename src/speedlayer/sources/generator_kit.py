"""What a kind of ``generator://`` event is written with: the generator's options and its draws.

A kind is a function ``kind(seq, opts, start_ms)`` from a DataFrame of sequence numbers (column
``n``), the ``GeneratorOptions`` and the event-time origin (epoch ms) to RAW rows (``value``,
``key``, ``offset``, ``ingest_time``). A kind with options of its own (the fleet's ``vehicles=``)
declares them as a subclass of ``GeneratorOptions`` with ``@kind_options``: ``generator://``
then takes them with ``kind=`` that kind, and refuses them with any other. Row ``n`` must be a
pure function of (seed, n, start, rate), never of ``rand`` or the wall clock, so that a replayed
batch and ``read_batch`` give the same rows. speedlayer's own kinds live with their jobs
(``pipelines.fleet.vehicle_kind``, ``pipelines.app_actions_kind``, ...) and are written with this
module; a package registers a kind of its own as an entry point (``speedlayer.sources.generator_kinds``).

>>> def order_events(seq, opts, start_ms):  # doctest: +SKIP
...     df = timeline(seq, opts, start_ms)     # n, src (what a re-sent copy repeats), event_ms
...     order = F.struct(F.format_string("o%d", "src").alias("order_id"), iso_time(F.col("event_ms")).alias("order_time"))
...     key = F.format_string("c%d", F.col("src") % 5)
...     return df.select(F.to_json(order).alias("value"), *metadata(opts, start_ms, key))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, Field, ValidationInfo, field_validator
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from speedlayer.core.durations import parse_duration
from speedlayer.core.errors import ConfigError
from speedlayer.sources.generator_kinds import kinds


class GeneratorOptions(BaseModel):
    """The options of ``generator://`` every kind takes (``rate``, ``seed``, ``disorder``, ``late``, ...)."""

    kind: str = Field("vehicles", description="what to generate: vehicles, actions, transactions, labels, rides, "
                      "or a kind a package registers (speedlayer.generator_kinds)")
    rate: int = Field(5000, gt=0, description="events per second (paced), also the event-time spacing")
    seed: int = 42
    start: str | None = Field(None, description="event-time origin, ISO-8601 or epoch ms; default: when the first query starts")
    disorder: str = Field("2s", description="maximum event-time disorder")
    late: float = Field(0.005, ge=0, le=1, description="fraction of events delayed beyond the watermark")
    late_delay: str = Field("60s", description="typical delay of a late event (0.5x to 1.5x of it)")
    duplicates: float = Field(0.01, ge=0, le=1, description="fraction of events re-sent")
    malformed: float = Field(0.002, ge=0, le=1, description="fraction of corrupted payloads")
    partitions: int | None = Field(None, gt=0)
    rows_per_batch: int | None = Field(None, gt=0, description="unpaced: this many events per micro-batch")
    max_per_batch: int | None = Field(None, gt=0, description="paced to the millisecond, at most this many events "
                                      "per micro-batch: a machine too slow for the rate falls behind in bounded "
                                      "batches, shown as the source's lag")

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        known = kinds()
        if value not in known:
            raise ValueError(f"unknown kind {value!r}: choose one of {', '.join(known)} (a package adds one "
                             "through the entry-point group speedlayer.generator_kinds)")
        return value

    @field_validator("max_per_batch")
    @classmethod
    def _one_batching(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value and info.data.get("rows_per_batch"):
            raise ValueError("rows_per_batch (unpaced) and max_per_batch (paced, bounded) exclude each other: keep one")
        return value

    @field_validator("disorder", "late_delay")
    @classmethod
    def _duration(cls, value: str) -> str:
        parse_duration(value)
        return value


Kind = TypeVar("Kind", bound=Callable[..., Any])


def kind_options(options: type[GeneratorOptions]) -> Callable[[Kind], Kind]:
    """Declare the options a kind takes beyond the generator's own: a subclass of ``GeneratorOptions``.

    >>> class OrderOptions(GeneratorOptions):
    ...     customers: int = Field(500, gt=0, description="customers who order")
    >>> @kind_options(OrderOptions)
    ... def order_events(seq, opts, start_ms): ...   # reads opts.customers
    >>> options_of(order_events) is OrderOptions, options_of(lambda seq, opts, start_ms: seq) is GeneratorOptions
    (True, True)
    """
    if not (isinstance(options, type) and issubclass(options, GeneratorOptions)):
        raise TypeError(f"kind_options takes a subclass of GeneratorOptions, not {options!r}")

    def declare(kind: Kind) -> Kind:
        kind.options = options
        return kind
    return declare


def options_of(kind: Callable[..., Any]) -> type[GeneratorOptions]:
    """The options model of a kind's function (``GeneratorOptions`` unless it declares its own)."""
    options = getattr(kind, "options", GeneratorOptions)
    if not (isinstance(options, type) and issubclass(options, GeneratorOptions)):
        raise ConfigError(f"generator kind {getattr(kind, '__qualname__', kind)!r} declares options {options!r}, "
                          "not a subclass of GeneratorOptions: fix its package (speedlayer.generator_kinds)")
    return options


def own_options(options: GeneratorOptions) -> dict[str, Any]:
    """The options of ``options``' kind that the generator itself does not have, with their values.

    >>> own_options(GeneratorOptions())
    {}
    """
    return {name: getattr(options, name) for name in type(options).model_fields if name not in GeneratorOptions.model_fields}


def uniform(seed: int, key: Column, salt: int) -> Column:
    """A reproducible uniform draw in [0, 1) for (seed, key, salt): a hash, not Spark's rand().

    >>> uniform(42, F.col("n"), 1)  # doctest: +SKIP
    Column<'(pmod(xxhash64(42, n, 1), 2147483647) / 2.147483647E9)'>
    """
    bits = F.pmod(F.xxhash64(F.lit(seed), key, F.lit(salt)), F.lit(2_147_483_647))
    return bits / F.lit(2_147_483_647.0)


def pick(draw: Column, mix: tuple[tuple[str, float], ...]) -> Column:
    """The item of ``mix`` a uniform ``draw`` in [0, 1) falls on, by cumulative share."""
    result, bound = None, 0.0
    for item, share in mix[:-1]:
        bound += share
        result = (F.when(draw < bound, F.lit(item)) if result is None else result.when(draw < bound, F.lit(item)))
    return result.otherwise(F.lit(mix[-1][0]))


def resent(opts: GeneratorOptions, n: Column) -> Column:
    """Whether row ``n`` re-sends an earlier event (``timeline``'s ``src`` names which) rather than a new one.

    >>> resent(GeneratorOptions(), F.col("n"))  # doctest: +SKIP
    """
    return (uniform(opts.seed, n, 1) < opts.duplicates) & (n > 0)


def timeline(seq: DataFrame, opts: GeneratorOptions, start_ms: int) -> DataFrame:
    """``n``, ``src`` (the event a re-send copies) and ``event_ms``, as the vehicle generator spaces them."""
    c, seed = F.col, opts.seed
    is_dup = resent(opts, c("n"))
    df = seq.select("n", F.when(is_dup, F.greatest(c("n") - 1 - F.floor(uniform(seed, c("n"), 2) * 3), F.lit(0)))
                    .otherwise(c("n")).cast("long").alias("src"))
    src = c("src")
    lateness = F.when(uniform(seed, src, 3) < opts.late,
                      F.floor(F.lit(parse_duration(opts.late_delay)) * (0.5 + uniform(seed, src, 4)))).otherwise(0)
    event_ms = (F.lit(start_ms) + F.floor(src * (1000.0 / opts.rate))
                - F.floor(uniform(seed, src, 5) * parse_duration(opts.disorder)) - lateness)
    return df.select("n", "src", event_ms.cast("long").alias("event_ms"))


def metadata(opts: GeneratorOptions, start_ms: int, key: Column) -> list[Column]:
    """key, offset (``n``) and ingest_time (event ``n``'s place on the paced timeline)."""
    ingest = F.lit(start_ms) + F.floor(F.col("n") * (1000.0 / opts.rate)) + fence()
    return [key.alias("key"), F.col("n").cast("string").alias("offset"),
            F.timestamp_millis(ingest.cast("long")).alias("ingest_time")]


def corrupt(good: Column, seed: int, src: Column, replacements: list[Column]) -> Column:
    """One of: the payload cut in half, one of ``replacements`` (edits of ``good``), or not JSON."""
    kind = F.floor(uniform(seed, src, 8) * (len(replacements) + 2))
    result = F.when(kind == 0, F.substring(good, 1, 12))
    for i, replacement in enumerate(replacements, start=1):
        result = result.when(kind == i, replacement)
    return result.otherwise(F.concat(F.lit("#garbage "), src.cast("string")))


def fence() -> Column:
    """A nondeterministic zero, so a kind's last projection (``metadata``'s) is a wall for the optimizer.

    Spark pushes no filter through a projection that holds a nondeterministic field (SPARK-13473).
    Without this wall, decode's and the pipeline's filters are pushed down through every projection
    above and inline the payload's expressions into themselves many times over: in continuous mode
    (no dedup node in between) planning the alerts query never finished.

    Not ``rand``: a streaming query re-seeds every ``rand`` each micro-batch, the seed is a literal
    in the generated code, so every batch compiled the whole generator stage anew and ran it in
    the JVM's interpreter until the JIT caught up (the fleet job's overhead over plain PySpark
    fell from +33% to +10% without it).
    """
    return F.spark_partition_id() * 0


def iso_time(epoch_ms: Column) -> Column:
    """Epoch milliseconds as ISO-8601 text in UTC, as a payload carries its time (``2026-11-22T10:00:00.000Z``)."""
    return F.date_format(F.timestamp_millis(epoch_ms.cast("long")), "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")
