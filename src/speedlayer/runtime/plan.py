"""Planning a run: every check that needs neither Spark nor the state directory (modes, triggers,
URIs, paths), without I/O.

``plan_run`` turns settings into a ``RunPlan`` (one ``QueryPlan`` per selected output) or refuses
them in one line. A plan is immutable: running it changes nothing in it. What a run holds while
it runs (the state directory's lock, its manifest) is ``speedlayer.runtime.run_state``'s; the
runner, ``speedlayer.runtime.run.Run``, prepares, starts, stops and cleans up what was planned.
"""


from __future__ import annotations

import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from speedlayer.core import faults
from speedlayer.core.durations import format_duration, parse_duration, positive_duration
from speedlayer.core.errors import ConfigError
from speedlayer.core.modes import OUTPUT_MODES
from speedlayer.core.tables import TableRef, sql_name
from speedlayer.core.uris import parse_options
from speedlayer.pipelines import get_job
from speedlayer.pipelines.base import Job, Output, Params
from speedlayer.pipelines.job_file import load_job_file
from speedlayer.runtime.code_shipping import plan_code_shipping
from speedlayer.runtime.settings import RunSettings, max_ahead_ms
from speedlayer.runtime.shared import main_readers, share_queries
from speedlayer.runtime.shipping import check_ship
from speedlayer.runtime.triggers import Trigger, parse_trigger
from speedlayer.sinks import open_sink, sinks
from speedlayer.sinks.base import Sink
from speedlayer.sources import open_source
from speedlayer.sources.base import Source

#: Spark's floor on a real-time batch duration, and its default
REALTIME_MIN_CONF, REALTIME_MIN_DEFAULT_MS = "spark.sql.streaming.realTimeMode.minBatchDuration", 5000


@dataclass(frozen=True)
class QueryPlan:
    output: Output
    sink: Sink
    mode: str
    #: the query's name (the sink's own where it names its query: a memory table)
    name: str
    checkpoint: Path
    #: written by the job's shared query (``--one-query``, ``speedlayer.runtime.shared``)
    shared: bool = False

    @property
    def fresh(self) -> bool:
        return not (self.checkpoint / "offsets").is_dir()


@dataclass(frozen=True)
class RunPlan:
    settings: RunSettings
    job: Job
    source: Source
    params: Params
    trigger: Trigger
    queries: tuple[QueryPlan, ...]
    state_dir: Path
    temporary_state: bool
    notes: tuple[str, ...] = ()
    #: sources of the job's second streams (``Job.inputs``) that selected outputs read, by name
    inputs: Mapping[str, Source] = field(default_factory=dict)
    #: zips of the job's own code for the Python workers (``speedlayer.runtime.code_shipping``)
    py_files: tuple[Path, ...] = ()

    def _connectors(self) -> list:
        return [self.source, *self.inputs.values(), *(qp.sink for qp in self.queries)]

    def spark_packages(self) -> list[str]:
        """The Maven coordinates the run's connectors need in its Spark session, each once."""
        return list(dict.fromkeys(p for connector in self._connectors() for p in connector.spark_packages()))

    def spark_conf(self) -> dict[str, str]:
        """The session settings the run's connectors need (``Sink.spark_conf``)."""
        return {k: v for connector in self._connectors() for k, v in connector.spark_conf().items()}

    def explain_failure(self, text: str) -> str | None:
        """The first of the run's sources that recognises a query failure, in its own one line."""
        return next((line for source in [self.source, *self.inputs.values()]
                     if (line := source.explain_failure(text))), None)

    def tables(self) -> dict[str, TableRef]:
        """The tables a batch query can read of this run, by SQL name: each output whose sink can be read
        back, then the job's static tables (an output of the same name wins).

        >>> plan_run(RunSettings(job="fleet", sinks={"windows": "parquet:out/w"})).tables()  # doctest: +SKIP
        {'windows': TableRef(format='parquet', ...), 'zones': TableRef(format='csv', ...)}
        """
        found = {sql_name(qp.output.name): table for qp in self.queries if (table := qp.sink.read_back()) is not None}
        for name, table in (self.job.tables(self.params) if self.job.tables else {}).items():
            found.setdefault(sql_name(name), table)
        return found

    def first_source(self, output: Output) -> Source:
        """The source an output's query reads first (``--max-events`` counts its events)."""
        return self.inputs[output.dead_letters_of] if output.dead_letters_of else self.source


def _params(settings: RunSettings, job: Job, stateless: bool) -> Params:
    known = set(job.options.model_fields) if job.options else set()
    for key in sorted(settings._loose - known):
        options = f"; job {job.name!r} options are {', '.join(sorted(known))}" if known else ""
        raise ConfigError(f"unknown setting {key!r}: known settings are {', '.join(RunSettings.model_fields)}{options}")
    if settings.options and job.options is None:
        given = ", ".join(sorted(settings.options))
        raise ConfigError(f"job {job.name!r} takes no options (got {given}): remove them")
    options = parse_options(job.options, settings.options, f"job {job.name}") if job.options else None
    params = Params(
        window_ms=positive_duration(settings.window, "--window"),
        sliding_window_ms=positive_duration(settings.sliding_window, "sliding window"),
        slide_ms=positive_duration(settings.slide, "--slide"),
        watermark_ms=parse_duration(settings.watermark, "--watermark"),
        stateless=stateless,
        dedup=settings.dedup,
        options=options,
    )
    if params.slide_ms > params.sliding_window_ms:
        raise ConfigError(f"--slide {settings.slide} is longer than the sliding window {settings.sliding_window}: "
                          "the slide must be at most the window length")
    return params


def _mode_for(output: Output, sink: Sink, modes: dict[str, str], continuous: bool, realtime: bool = False) -> str:
    # Real-time mode writes update only, so it is the default there.
    default = "update" if realtime and "update" in output.modes else output.default_mode
    mode = (modes.get(output.name) or modes.get("*") or default).lower()
    if mode not in OUTPUT_MODES:
        raise ConfigError(f"unknown output mode {mode!r}: use append, update or complete")
    if mode not in output.modes:
        note = f" ({output.modes_note})" if output.modes_note else ""
        raise ConfigError(f"output {output.name!r} cannot be written in {mode} mode: it fits {', '.join(output.modes)}{note}")
    if mode not in sink.modes:
        raise ConfigError(
            f"sink {sink.scheme}: takes {', '.join(sink.modes)} mode only, not {mode} (output {output.name!r}): "
            f"use --output-mode {output.name}={sink.modes[0]} or another sink"
        )
    if continuous and mode != "append":
        raise ConfigError(f"continuous mode writes append only: use --output-mode {output.name}=append")
    if realtime and mode != "update":
        raise ConfigError(f"real-time mode writes update only: use --output-mode {output.name}=update")
    return mode


def _check_realtime(trigger: Trigger, source: Source, conf: dict[str, str]) -> None:
    """Real-time mode reads Kafka only, in batches no shorter than Spark's minimum."""
    if not source.supports_realtime:
        raise ConfigError(f"source {source.uri.scheme}:// cannot be read in real-time mode (Spark runs it on Kafka only): "
                          "use a kafka:// source, or a micro-batch trigger such as processing:1s")
    floor = conf.get(REALTIME_MIN_CONF, str(REALTIME_MIN_DEFAULT_MS)).strip()
    floor_ms = int(floor) if floor.isdigit() else parse_duration(floor, REALTIME_MIN_CONF)
    if trigger.interval_ms < floor_ms:
        raise ConfigError(f"trigger {trigger} is shorter than real-time mode's minimum batch duration "
                          f"{format_duration(floor_ms)} ({REALTIME_MIN_CONF}): use realtime:{format_duration(floor_ms)} or more")


def plan_run(settings: RunSettings, job: Job | None = None, sinks: Mapping[str, Sink] | None = None) -> RunPlan:
    """Check a run completely and resolve everything it needs, without starting Spark or touching
    the state directory.

    ``job`` runs a Job object (registered or not: your own, in a test) instead of the job that
    ``settings.job`` names; both must carry the same name. ``sinks`` gives outputs a Sink object
    (a test double, a measuring sink) where ``settings.sinks`` would give a URI; it is checked the same way.

    >>> plan = plan_run(RunSettings(job="fleet", sinks={"windows": "memory:w"}))  # doctest: +SKIP
    >>> plan = plan_run(RunSettings(job=MY_JOB.name), job=MY_JOB)                  # doctest: +SKIP
    >>> plan = plan_run(RunSettings(job="fleet"), sinks={"alerts": CollectSink()})  # doctest: +SKIP
    """
    if job is None:
        job = load_job_file(settings.job_file) if settings.job_file else get_job(settings.job)
    elif job.name != settings.job:
        raise ConfigError(f"the settings name job {settings.job!r} but the job given is {job.name!r}: "
                          f"set RunSettings(job={job.name!r})")
    settings = settings.with_job_defaults({"source": job.default_source, **job.defaults})
    job = job.with_max_ahead(max_ahead_ms(settings.max_ahead, settings.watermark), override=settings.max_ahead is not None)
    trigger = parse_trigger(settings.trigger)
    check_ship(settings.ship)
    state_dir, temporary = _state_dir(settings)
    params = replace(_params(settings, job, trigger.stateless), state_dir=str(state_dir))
    if job.check is not None:
        job.check(params)
    given = _sink_objects(sinks)
    if not settings.sinks and not given and not job.default_outputs:
        raise ConfigError(f"job {job.name!r} names no default outputs: choose with --sink NAME=URI "
                          f"(its outputs: {', '.join(job.outputs)})")
    sink_uris = {**settings.sinks, **given} or dict.fromkeys(job.default_outputs, "console:")
    for name in list(sink_uris) + [k for k in settings.output_mode if k != "*"]:
        if name not in job.outputs:
            raise ConfigError(f"job {job.name!r} has no output {name!r}: its outputs are {', '.join(job.outputs)}")
    notes = []
    if temporary:
        notes.append(f"no --state-dir: checkpoints go to {state_dir} and are removed at exit (a restart starts over)")
    if trigger.stateless:
        notes.append(f"{trigger.mode} is at-least-once and keeps no state: re-sent events are not removed")
    code = plan_code_shipping(job, settings.master, settings.ship)  # the job's own modules, for Python workers
    notes.extend([code.note] if code.note else [])

    queries = _query_plans(settings, job, params, trigger, sink_uris, given, state_dir)
    if settings.one_query:
        queries, shared_notes = share_queries(job.name, queries, trigger, state_dir)
        notes.extend(shared_notes)
    source = _open_source(settings, job, trigger)
    notes.extend(filter(None, [*source.warnings(), faults.note()]))
    source.check_plan(main_readers(queries))
    inputs = _input_sources(settings, job, source, trigger, queries, notes)
    return RunPlan(settings, job, source, params, trigger, tuple(queries), state_dir, temporary, tuple(notes),
                   inputs=inputs, py_files=code.py_files)


def _query_plans(settings: RunSettings, job: Job, params: Params, trigger: Trigger,
                 sink_uris: Mapping[str, str | Sink], given: Mapping[str, Sink], state_dir: Path) -> list[QueryPlan]:
    """One query per output: its sink opened and checked against the output, its mode, name and checkpoint."""
    queries, destinations = [], {}
    for name, uri in sink_uris.items():
        try:
            sink = given[name] if name in given else open_sink(uri)
        except ConfigError as exc:  # several outputs may write to one kind of sink: say whose it is
            raise ConfigError(f"--sink {name}: {exc}") from None
        output = job.outputs[name].for_params(params)
        _check_output_fits(job, output, sink, trigger)
        where = sink.destination(job.name, name)
        if where is not None:
            if where in destinations:
                raise ConfigError(f"outputs {destinations[where]!r} and {name!r} both write to the same {where[0]} "
                                  f"({sink.describe()}): give each its own")
            destinations[where] = name
        mode = _mode_for(output, sink, settings.output_mode, trigger.continuous, trigger.realtime)
        if output.check is not None:  # settings only this output depends on, in its mode
            output.check(params, mode)
        queries.append(QueryPlan(output, sink, mode, sink.query_name(f"{job.name}_{name.replace('-', '_')}"),
                                 state_dir / "checkpoints" / name))
    return queries


def _sink_objects(sinks: Mapping[str, Sink] | None) -> dict[str, Sink]:
    """``plan_run``'s ``sinks``: Sink objects by output name, or a one-line refusal of anything else."""
    if sinks is None:
        return {}
    if not isinstance(sinks, Mapping):
        raise ConfigError(f"sinks= takes a dict of output name -> Sink object, not {type(sinks).__name__}")
    for name, sink in sinks.items():
        if not isinstance(sink, Sink):
            given = f"the class {sink.__name__}" if isinstance(sink, type) else f"{type(sink).__name__} {sink!r}"[:80]
            raise ConfigError(f"sinks={{{name!r}: ...}} takes a Sink object, not {given}: give an instance "
                              "(MySink(...)), or a URI in the settings' sinks (RunSettings(sinks={...}))")
    return dict(sinks)


def _open_source(settings: RunSettings, job: Job, trigger: Trigger) -> Source:
    """The run's main source, checked against the trigger."""
    if not settings.source:
        raise ConfigError(f"job {job.name!r} names no default source: give --source URI (e.g. files:///landing?format=json)")
    source = open_source(settings.source)
    source.event_schema = job.schema
    source.continuous = trigger.continuous
    if trigger.continuous and not source.supports_continuous:
        raise ConfigError(f"source {source.uri.scheme}:// cannot be read in continuous mode: "
                          "use a micro-batch trigger such as processing:1s")
    source.check_trigger(trigger.kind)
    if settings.max_events and not source.supports_max_events:
        raise ConfigError(f"--max-events: {source.uri.scheme}:// does not count the events it reads; "
                          f"{source.how_to_bound}")
    if trigger.continuous and settings.max_events:
        raise ConfigError("continuous mode has no batches to count events by: bound the run with --duration, "
                          "or use --max-events with a micro-batch trigger such as processing:0s")
    if trigger.realtime:
        _check_realtime(trigger, source, settings.conf)
    return source


def _state_dir(settings: RunSettings) -> tuple[Path, bool]:
    """The state directory, and whether it is a temporary one (no --state-dir)."""
    if settings.state_dir:
        return Path(settings.state_dir).resolve(), False
    return Path(tempfile.gettempdir()) / f"speedlayer-state-{uuid.uuid4().hex[:12]}", True


def _check_output_fits(job: Job, output: Output, sink: Sink, trigger: Trigger) -> None:
    """Refuse an output or sink the trigger cannot run (continuous and real-time mode, per-batch outputs)."""
    name = output.name
    if trigger.stateless and output.stateful:
        stateless = ", ".join(o.name for o in job.outputs.values() if not o.stateful)
        raise ConfigError(f"output {name!r} keeps state (windows), which {trigger.mode} cannot do: "
                          f"use a micro-batch trigger such as processing:1s, or select only {stateless}")
    instead = sink.instead or "console:, memory: or spark-kafka://"
    if trigger.continuous and not sink.supports_continuous:
        raise ConfigError(f"sink {sink.scheme}: cannot take continuous output (Spark runs no file or Python sink "
                          f"in continuous mode): use {instead}, or a micro-batch trigger")
    if trigger.realtime and not sink.supports_realtime:
        raise ConfigError(f"sink {sink.scheme}: cannot take real-time output (Spark's real-time mode writes to "
                          f"console and Kafka only): use {sink.instead or 'console: or spark-kafka://'}, "
                          "or a micro-batch trigger")
    if output.per_batch is not None and (trigger.continuous or trigger.realtime):
        raise ConfigError(f"output {name!r} is computed per micro-batch (foreachBatch): use a micro-batch trigger "
                          "such as processing:1s")
    if output.per_batch is not None and not sink.writes_batches:
        raise ConfigError(f"output {name!r} is computed per micro-batch (foreachBatch), which sink {sink.scheme}: "
                          f"cannot take: write it to {_batch_sinks()}")


def _batch_sinks() -> str:
    """The sinks that take an output computed per micro-batch, one scheme per sink: 'console:, ... or delta:'."""
    first: dict[type, str] = {}
    for scheme, cls in sinks().items():
        if cls.writes_batches:
            first.setdefault(cls, f"{scheme}:")  # an alias (postgres:, mariadb:) is the same sink
    *others, last = first.values()
    return f"{', '.join(others)} or {last}" if others else last


def _input_sources(settings: RunSettings, job: Job, source: Source, trigger: Trigger, queries: list[QueryPlan],
                   notes: list[str]) -> dict[str, Source]:
    """The source of each second stream a selected output reads (``--input rides=URI``, or ``--rides URI``).

    Without one, the main source's ``default_input`` is read (a generator run: the same generator's
    kind of that name, same seed and rate); a source with none is refused. A URI given is completed by the
    main source (``complete_input``: a generator's fills in the options it leaves out). A stream no selected
    output reads is never opened for reading.
    """
    sources = {}
    for name, schema in job.inputs.items():
        uri = settings.inputs.get(name)
        readers = [q.output.name for q in queries if name in q.output.inputs]
        if uri is not None:
            try:
                opened = open_source(source.complete_input(name, uri))  # a bad URI is refused even when nothing reads it
            except ConfigError as exc:
                raise ConfigError(f"--{name}: {exc}") from None
        if not readers:
            if uri is not None:
                notes.append(f"--{name} is read only by {', '.join(o.name for o in job.outputs.values() if name in o.inputs)}, "
                             "which this run does not write: it is not read")
            continue
        if uri is None:
            default = source.default_input(name)
            if default is None:
                raise ConfigError(f"output {readers[0]!r} joins a second stream, {name}: give its source with --{name} URI "
                                  f"(e.g. --{name} 'generator://?kind={name}' or a redis://, kafka://, files:// URI)")
            opened = open_source(default)
        opened.event_schema = schema
        if trigger.realtime:
            raise ConfigError(f"output {readers[0]!r} reads two streams, which real-time mode cannot: use a micro-batch trigger")
        opened.check_plan(readers)
        sources[name] = opened
    given = [name for name in settings.inputs if name not in job.inputs]
    if given:
        raise ConfigError(f"job {job.name!r} reads no second stream {given[0]}: drop --{given[0]}")
    return sources
