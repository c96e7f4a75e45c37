"""What a job is: an event schema to decode, a pure pipeline function, and its named outputs."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.core.errors import ConfigError
from speedlayer.core.keys import EXAMPLE, key_fields, key_problems, python_key
from speedlayer.core.modes import APPEND, UPDATE
from speedlayer.core.schemas import EventSchema
from speedlayer.core.tables import TableRef
from speedlayer.decode.observation import observed_decode
from speedlayer.decode.validate import Decoded, decode


@dataclass(frozen=True)
class Params:
    """The generic settings a pipeline reads (durations in milliseconds), and the job's own options.

    A job's own settings live in its options model (``Job.options``), e.g. the fleet's trip gap in
    ``FleetOptions``: ``params.options`` is that model, validated.

    >>> Params(window_ms=20_000).window_ms
    20000
    """

    window_ms: int = 10_000
    sliding_window_ms: int = 60_000
    slide_ms: int = 10_000
    watermark_ms: int = 5_000
    #: continuous and real-time mode keep no state: no watermark, and re-sent events are not dropped
    stateless: bool = False
    #: which copy of a re-sent event a stream keeps: "exact" the lowest offset, "fast" the first Spark meets
    dedup: str = "exact"
    #: the job's own options (an instance of ``Job.options``), from ``--option KEY=VALUE`` or their own flags
    options: Any = None
    #: the run's state directory: a job keeps files of its own under it (the fraud job's learned models)
    state_dir: str | None = None


@dataclass(frozen=True)
class Output:
    """A named output: the modes it can be written in, and whether it needs state (none in continuous or real-time mode)."""

    name: str
    summary: str
    modes: tuple[str, ...]
    default_mode: str
    #: whether its query keeps state; None: found from the query's plan before start (job files' SQL)
    stateful: bool | None
    #: the columns that identify a row (upserting sinks key on them)
    key: tuple[str, ...] = ()
    #: checks the settings this output depends on, in the mode it is written in (raises ConfigError):
    #: ``check(params, mode)``; the runner calls it for selected outputs
    check: Callable[[Params, str], None] | None = None
    #: computed on each micro-batch alone, inside ``foreachBatch``: ``per_batch(rows, batch_id)``
    #: turns the pipeline's rows of one batch into this output (on a static DataFrame: batch id 0)
    per_batch: Callable[[DataFrame, int], DataFrame] | None = None
    #: the key in append mode when it differs from ``key`` (e.g. windows with lateness keep every revision)
    append_key: tuple[str, ...] = ()
    #: said when a mode is refused, e.g. why a setting narrows ``modes``
    modes_note: str = ""
    #: this output as the run's settings shape it (modes, default mode, key); None: as declared
    configure: Callable[[Output, Params], Output] | None = None
    #: the job's second streams (``Job.inputs``) this output reads, each from its own source (``--rides URI``)
    inputs: tuple[str, ...] = ()
    #: this output is the dead letters of that input (it reads neither the main source nor the pipeline)
    dead_letters_of: str | None = None
    #: the file that defines this output (a job file): a refusal of its query says to fix it there
    defined_in: str | None = None

    def for_params(self, params: Params) -> Output:
        """This output under the run's settings.

        >>> lenient = Params(options=FleetOptions(allowed_lateness="30s"))      # doctest: +SKIP
        >>> FLEET.outputs["windows"].for_params(lenient).default_mode          # doctest: +SKIP
        'update'
        """
        return self if self.configure is None else self.configure(self, params)

    def key_in(self, mode: str) -> tuple[str, ...]:
        """The columns that identify a row written in ``mode``."""
        return self.append_key if mode == APPEND and self.append_key else self.key


@dataclass(frozen=True)
class Trainer:
    """A model a job fits in batch before it runs: ``speedlayer train JOB`` (``Job.trainer``).

    ``options`` is a pydantic model of the training's settings, each a flag of ``speedlayer train
    JOB`` (``--model DIR``) and an ``--option KEY=VALUE``; ``fit(spark, options)`` trains, saves,
    and returns the lines to print (what it was fitted on, how well it does).

    >>> Trainer(FraudTraining, fit_fraud, "a logistic regression on generated history").summary  # doctest: +SKIP
    'a logistic regression on generated history'
    """

    options: type[BaseModel]
    fit: Callable[[Any, Any], list[str]]
    summary: str = ""


@dataclass(frozen=True)
class Positions:
    """Where a job's events put an entity, for the dashboard's map: the field naming it and its position.

    The map shows each entity's latest position (``lat``, ``lon``: fields in degrees), with the
    event's other number fields. ``areas(params)``, when given, returns rectangles drawn under the
    positions: dicts with ``name``, ``min_lat``, ``max_lat``, ``min_lon``, ``max_lon`` (the fleet's
    speed-limit zones also carry ``speed_limit_kmh``, which the map labels them with).

    >>> Positions("courier_id").fields
    ('courier_id', 'lat', 'lon')
    """

    key: str
    lat: str = "lat"
    lon: str = "lon"
    areas: Callable[[Params], list[dict[str, Any]]] | None = None

    @property
    def fields(self) -> tuple[str, str, str]:
        return (self.key, self.lat, self.lon)


@dataclass(frozen=True)
class Job:
    """A job: ``pipeline(events, params, **inputs)`` returns a DataFrame for each output except dead letters."""

    name: str
    summary: str
    schema: EventSchema
    pipeline: Callable[[DataFrame, Params], Mapping[str, DataFrame]]
    outputs: Mapping[str, Output]
    default_outputs: tuple[str, ...] = field(default=())
    #: the field re-sent copies of an event share, or a tuple of the fields they share together (a
    #: device and its reading time): the pipeline drops copies by it, and the ``late`` output (``LATE``)
    #: keys its rows on it; None: the job drops no copies and offers no ``late``
    dedup_key: str | tuple[str, ...] | None = None
    #: the source a run reads when it names none (``--source`` and the config file win); "": none, a run must give one
    default_source: str = ""
    #: run settings this job defaults differently, e.g. ``{"sliding_window": "30s"}`` (flags win)
    defaults: Mapping[str, str] = field(default_factory=dict)
    #: a pydantic model of the job's options (``--option KEY=VALUE``); None: it takes none
    options: type[BaseModel] | None = None
    #: RAW rows -> typed events and dead letters; None: JSON validated against ``schema``. One that also
    #: takes ``observe`` and ``latency_sample`` attaches the per-batch observation (``observed_decode``)
    decoder: Callable[[DataFrame, EventSchema], Decoded] | None = None
    #: checks before start that need no Spark (a model on disk, ...); raises ConfigError
    check: Callable[[Params], None] | None = None
    #: second event streams some outputs join, by name (a run setting of that name gives the source URI);
    #: the pipeline receives each as a keyword argument, a ``Decoded``, when the output it builds reads it
    inputs: Mapping[str, EventSchema] = field(default_factory=dict)
    #: local files or directories the job reads on executors (a model, a table), what -> path: on a
    #: cluster each is checked to be shared by every machine before start (``speedlayer.runtime.reach``)
    shared_paths: Callable[[Params], Mapping[str, Path]] | None = None
    #: a digest of what the job computes, when a file defines it (a job file): the run manifest
    #: records it, and a resume after it changed is refused like a changed setting
    definition: str | None = None
    #: the model it fits in batch before it runs (``speedlayer train JOB``); None: it has none
    trainer: Trainer | None = None
    #: the entities the dashboard's map shows, by the fields of ``schema`` naming them and their
    #: position; None: the job has no map
    positions: Positions | None = None
    #: the static tables it reads (zones, profiles) by name, each a ``TableRef``: ``speedlayer sql``
    #: shows them as views beside the outputs; None: it reads none
    tables: Callable[[Params], Mapping[str, TableRef]] | None = None

    def __post_init__(self) -> None:
        """Checks the map's fields and the dedup key, and keys the ``late`` output (the name is reserved for ``LATE``) by it."""
        _check_positions(self)
        late = self.outputs.get(LATE.name)
        if isinstance(self.dedup_key, list):
            object.__setattr__(self, "dedup_key", tuple(self.dedup_key))
        if self.dedup_key is not None:
            check_dedup_key(self, late=late is not None)
        if late is None:
            return
        if self.dedup_key is None:
            raise ConfigError(f"job {self.name!r} lists the late output but declares no dedup_key: give "
                              "Job(dedup_key=FIELD), the field re-sent copies of an event share (or a tuple of the "
                              "fields they share together), or drop the output")
        keyed = replace(late, key=(*self.dedup_fields, "missed_watermark"))
        object.__setattr__(self, "outputs", {name: keyed if name == LATE.name else o for name, o in self.outputs.items()})

    @property
    def dedup_fields(self) -> tuple[str, ...]:
        """The fields of ``dedup_key``, in order (none without one).

        >>> replace(FLEET, dedup_key=("vehicle_id", "event_time")).dedup_fields  # doctest: +SKIP
        ('vehicle_id', 'event_time')
        """
        return () if self.dedup_key is None else key_fields(self.dedup_key)

    def with_max_ahead(self, max_ahead_ms: int, override: bool = True) -> Job:
        """This job with its streams' schemas allowing event times ``max_ahead_ms`` ahead of ingest time:
        every schema with ``override`` (the run's --max-ahead given), else those that set no bound of their own.

        >>> FLEET.with_max_ahead(2_000).schema.max_ahead_ms  # doctest: +SKIP
        2000
        """
        def allow(schema: EventSchema) -> EventSchema:
            return replace(schema, max_ahead_ms=max_ahead_ms) if override or schema.max_ahead_ms is None else schema

        return replace(self, schema=allow(self.schema), inputs={name: allow(s) for name, s in self.inputs.items()})

    def decode(self, raw: DataFrame, observe: str | None = None, latency_sample: float = 1.0) -> Decoded:
        """Typed events and dead letters of RAW rows, the way this job reads its payloads.

        ``observe`` names decode's per-batch observation (latency, dead letters) for the metrics,
        whose latency percentiles read ``latency_sample`` of the events. A job's own decoder that
        takes ``observe`` attaches it itself (``observed_decode``); of one that does not, the
        events it returns are observed (latency and events; its dead letters are not counted).
        """
        if self.decoder is None:
            return decode(raw, self.schema, observe=observe, latency_sample=latency_sample)
        if "observe" in inspect.signature(self.decoder).parameters:
            return self.decoder(raw, self.schema, observe=observe, latency_sample=latency_sample)
        decoded = self.decoder(raw, self.schema)
        time_type = dict(decoded.events.dtypes).get(self.schema.time_field)
        if not observe or time_type != "timestamp" or "ingest_time" not in decoded.events.columns:
            return decoded
        events = observed_decode(decoded.events, observe, F.col(self.schema.time_field), latency_sample=latency_sample)
        return replace(decoded, events=events)


def check_dedup_key(job: Job, late: bool) -> None:
    """A ConfigError naming the first thing wrong with ``job``'s dedup key (``speedlayer.core.keys``);
    ``late``: the job offers the late output."""
    if not isinstance(job.dedup_key, (str, tuple)):  # a set would key state in an order of its own each run
        raise ConfigError(f"job {job.name!r}: dedup_key must be a field name or a tuple of field names, not "
                          f"{type(job.dedup_key).__name__}: e.g. {python_key(EXAMPLE)}")
    fields = {f.name: f.required for f in job.schema.fields}
    problems = key_problems(job.dedup_fields, fields, job.schema.time_field, late=late)
    if problems:
        raise ConfigError(f"job {job.name!r}: dedup_key {problems[0]}")


def _check_positions(job: Job) -> None:
    """Refuse a map of fields the job's events do not have."""
    fields = [f.name for f in job.schema.fields]
    missing = [f for f in job.positions.fields if f not in fields] if job.positions else []
    if missing:
        raise ConfigError(f"job {job.name!r}: positions name {', '.join(map(repr, missing))}, not fields of its events "
                          f"({', '.join(fields)}): name the entity's key and its lat/lon fields")


class LazyOutputs(Mapping[str, DataFrame]):
    """A job's outputs, each built the first time it is asked for.

    A run starts one query per selected output, each asking the pipeline for one output; building
    the stateful ones (transformWithState, session windows) costs about a second of planning, so
    the others are never built.

    >>> outputs = LazyOutputs({"alerts": lambda: alerts_df})  # doctest: +SKIP
    >>> outputs["alerts"] is alerts_df                         # doctest: +SKIP
    True
    """

    def __init__(self, builders: Mapping[str, Callable[[], DataFrame]]):
        self._builders = dict(builders)
        self._built: dict[str, DataFrame] = {}

    def __getitem__(self, name: str) -> DataFrame:
        if name not in self._built:
            self._built[name] = self._builders[name]()
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._builders)

    def __len__(self) -> int:
        return len(self._builders)


DEAD_LETTERS = Output(
    name="dead-letters",
    summary="payloads that failed to parse or validate, with the reason",
    modes=(APPEND, UPDATE),
    default_mode=APPEND,
    stateful=False,
    key=("offset",),
)

#: The ``late`` output: events that arrived behind the watermark, which the job's stateful operators
#: drop, kept with the window they belonged to, the watermark they missed and their copies. A job
#: offers it by declaring ``dedup_key`` (its rows are keyed by its fields and ``missed_watermark``), listing
#: ``"late": LATE`` (or a copy with its own summary, ``dataclasses.replace(LATE, summary=...)``)
#: and returning ``late_events(...)`` (``speedlayer.pipelines.late``) from its pipeline.
LATE = Output(
    name="late",
    summary="events that arrived behind the watermark (the windows drop them): the window they belonged to "
            "and the watermark they missed",
    modes=(APPEND, UPDATE),
    default_mode=APPEND,
    stateful=True,
)
