"""The runner: validates a run before anything starts, then wires source -> decode -> pipeline -> sinks.

Every selected output becomes one streaming query with its own checkpoint under the state
directory. ``plan_run`` does all the checking that needs no Spark (modes, triggers, URIs, paths);
``Run`` starts the queries, watches them and stops them gracefully.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from speedlayer.checkpoints import check_intact, told_when_full
from speedlayer.config import RunSettings, max_ahead_ms
from speedlayer.decode import decode
from speedlayer.durations import format_duration, parse_duration, positive_duration
from speedlayer.errors import ConfigError, QueryFailedError, SpeedlayerError
from speedlayer.manifest import StateLock, check_resume, has_progress, lock_state_dir, read_manifest, write_manifest
from speedlayer.monitor.executors import ExecutorWatch, save_report
from speedlayer.monitor.metrics import OBSERVATION, latency_sample
from speedlayer.monitor.progress import ProgressTracker
from speedlayer.pipelines import get_job
from speedlayer.pipelines.base import OUTPUT_MODES, Job, Output, Params
from speedlayer.reach import check_reachable, run_places
from speedlayer.session import is_local
from speedlayer.shipping import check_ship
from speedlayer.sinks import open_sink
from speedlayer.sinks.base import Sink, Target
from speedlayer.sources import open_source
from speedlayer.sources.base import Source
from speedlayer.sources.generator import GeneratorSource
from speedlayer.state.incidents import check_initial_state
from speedlayer.stopping import first_line, raise_if_failed_while_stopping, stop_after_batch
from speedlayer.triggers import Trigger, parse_trigger
from speedlayer.uris import parse_options

#: what the last run did (per query: batches, rows, final watermark), written when it stops
LAST_RUN = "last-run.json"
#: batches a bounded (--max-events) query runs after its last event, so the watermark can close windows
FLUSH_BATCHES = 2
#: run settings that name the source of a job's second stream (``Job.inputs``)
INPUT_SETTINGS = ("rides",)
#: sinks Spark's real-time mode writes to (its allowlist: Spark's console, foreach writers, Kafka)
REALTIME_SINKS = ("console", "kafka")
#: Spark's floor on a real-time batch duration, and its default
REALTIME_MIN_CONF, REALTIME_MIN_DEFAULT_MS = "spark.sql.streaming.realTimeMode.minBatchDuration", 5000


@dataclass
class QueryPlan:
    output: Output
    sink: Sink
    mode: str
    name: str
    checkpoint: Path

    @property
    def fresh(self) -> bool:
        return not (self.checkpoint / "offsets").is_dir()


@dataclass
class RunPlan:
    settings: RunSettings
    job: Job
    source: Source
    params: Params
    trigger: Trigger
    queries: list[QueryPlan]
    state_dir: Path
    temporary_state: bool
    notes: list[str] = field(default_factory=list)
    prepared: bool = False
    #: sources of the job's second streams (``Job.inputs``) that selected outputs read, by name
    inputs: dict[str, Source] = field(default_factory=dict)
    #: the state directory's lock, held from before the manifest is written until the run ends
    lock: StateLock | None = None

    def lock_state(self) -> None:
        """Take the state directory's lock (once); another run holding it is a ConfigError."""
        if self.lock is None:
            with told_when_full(self.state_dir):
                self.lock = lock_state_dir(self.state_dir)

    def unlock_state(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def first_source(self, output: Output) -> Source:
        """The source an output's query reads first (``--max-events`` counts its events)."""
        return self.inputs[output.dead_letters_of] if output.dead_letters_of else self.source


def _params(settings: RunSettings, job: Job, continuous: bool) -> Params:
    if settings.options and job.options is None:
        raise ConfigError(f"job {job.name!r} takes no --option")
    options = parse_options(job.options, settings.options, f"job {job.name}") if job.options else None
    params = Params(
        window_ms=positive_duration(settings.window, "--window"),
        sliding_window_ms=positive_duration(settings.sliding_window, "sliding window"),
        slide_ms=positive_duration(settings.slide, "--slide"),
        watermark_ms=parse_duration(settings.watermark, "--watermark"),
        zones=settings.zones,
        continuous=continuous,
        dedup=settings.dedup,
        # --- trips, count windows (state-windows) ---
        trip_gap_ms=positive_duration(settings.trip_gap, "--trip-gap"),
        max_trip_ms=positive_duration(settings.max_trip, "--max-trip"),
        count_window=settings.count_window,
        # --- end state-windows ---
        # --- speeding incidents (issue 4: incidents) ---
        incident_after_ms=positive_duration(settings.incident_after, "--incident-after"),
        incident_timeout_ms=positive_duration(settings.incident_timeout, "--incident-timeout"),
        incident_updates=settings.incident_updates,
        incident_initial_state=settings.incident_initial_state,
        allowed_lateness_ms=_allowed_lateness(settings, job),
        # --- ride matching ---
        match_within_ms=parse_duration(settings.match_within, "--match-within"),
        match_cell_m=settings.match_cell,
        options=options,
    )
    # --- count windows (state-windows) ---
    if params.count_window <= 0:
        raise ConfigError(f"--count-window must be a number of pings of at least 1 (got {params.count_window}): "
                          "e.g. --count-window 20")
    # --- end state-windows ---
    if params.slide_ms > params.sliding_window_ms:
        raise ConfigError(f"--slide {settings.slide} is longer than the sliding window {settings.sliding_window}: "
                          "the slide must be at most the window length")
    return params


def _allowed_lateness(settings: RunSettings, job: Job) -> int:
    """--allowed-lateness in ms (0: not given); it corrects the fleet windows, so other jobs refuse it."""
    if settings.allowed_lateness is None:
        return 0
    if job.name != "fleet":
        raise ConfigError(f"--allowed-lateness only applies to the fleet job (its windows), not {job.name!r}: remove it")
    return positive_duration(settings.allowed_lateness, "--allowed-lateness")


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


def plan_run(settings: RunSettings) -> RunPlan:
    """Check a run completely and resolve everything it needs, without starting Spark.

    >>> plan = plan_run(RunSettings(job="fleet", sinks={"windows": "memory:w"}))  # doctest: +SKIP
    """
    job = get_job(settings.job)
    settings = settings.with_job_defaults({"source": job.default_source, **job.defaults})
    job = job.with_max_ahead(max_ahead_ms(settings.max_ahead, settings.watermark))
    trigger = parse_trigger(settings.trigger)
    check_ship(settings.ship)
    source = open_source(settings.source)
    source.event_schema = job.schema
    source.continuous = trigger.continuous
    params = _params(settings, job, trigger.continuous)
    if job.check is not None:
        job.check(params)
    if trigger.continuous and not source.supports_continuous:
        raise ConfigError(f"source {source.uri.scheme}:// cannot be read in continuous mode: "
                          "use a micro-batch trigger such as processing:1s")
    if trigger.continuous and settings.max_events:
        raise ConfigError("continuous mode has no batches to count events by: bound the run with --duration, "
                          "or use --max-events with a micro-batch trigger such as processing:0s")
    if trigger.realtime:
        _check_realtime(trigger, source, settings.conf)

    sink_uris = settings.sinks or dict.fromkeys(job.default_outputs, "console:")
    for name in list(sink_uris) + [k for k in settings.output_mode if k != "*"]:
        if name not in job.outputs:
            raise ConfigError(f"job {job.name!r} has no output {name!r}: its outputs are {', '.join(job.outputs)}")

    if settings.state_dir:
        state_dir, temporary = Path(settings.state_dir).resolve(), False
    else:
        state_dir, temporary = Path(tempfile.gettempdir()) / f"speedlayer-state-{uuid.uuid4().hex[:12]}", True
    notes = []
    if temporary:
        notes.append(f"no --state-dir: checkpoints go to {state_dir} and are removed at exit (a restart starts over)")
    if trigger.continuous:
        notes.append("continuous mode is at-least-once and keeps no state: re-sent events are not removed")
    notes.extend(source.warnings())

    queries, destinations = [], {}
    for name, uri in sink_uris.items():
        output, sink = job.outputs[name].for_params(params), open_sink(uri)
        if trigger.continuous and output.stateful:
            stateless = ", ".join(o.name for o in job.outputs.values() if not o.stateful)
            raise ConfigError(f"output {name!r} keeps state (windows), which continuous mode cannot do: "
                              f"use a micro-batch trigger such as processing:1s, or select only {stateless}")
        if trigger.continuous and not sink.supports_continuous:
            raise ConfigError(f"sink {sink.scheme}: cannot take continuous output (Spark runs no file or Python sink "
                              "in continuous mode): use console: or memory:, or a micro-batch trigger")
        if trigger.realtime and sink.scheme not in REALTIME_SINKS:
            raise ConfigError(f"sink {sink.scheme}: cannot take real-time output (Spark's real-time mode writes to "
                              "console and Kafka only): use console:, or a micro-batch trigger")
        where = sink.destination(job.name, name)
        if where is not None:
            if where in destinations:
                raise ConfigError(f"outputs {destinations[where]!r} and {name!r} both write to the same {where[0]} "
                                  f"({sink.describe()}): give each its own")
            destinations[where] = name
        if output.per_batch is not None and (trigger.continuous or trigger.realtime):
            raise ConfigError(f"output {name!r} is computed per micro-batch (foreachBatch): use a micro-batch trigger "
                              "such as processing:1s")
        if output.per_batch is not None and not sink.writes_batches:
            raise ConfigError(f"output {name!r} is computed per micro-batch (foreachBatch), which sink {sink.scheme}: "
                              "cannot take: write it to console:, postgresql:, mysql: or redis:")
        mode = _mode_for(output, sink, settings.output_mode, trigger.continuous, trigger.realtime)
        if output.check is not None:  # settings only this output depends on (state-windows)
            output.check(params)
        queries.append(QueryPlan(output, sink, mode, f"{job.name}_{name.replace('-', '_')}",
                                 state_dir / "checkpoints" / name))
    source.check_plan([q.output.name for q in queries if not q.output.dead_letters_of])
    _check_incidents(params, queries)
    inputs = _input_sources(settings, job, source, trigger, queries, notes)
    return RunPlan(settings, job, source, params, trigger, queries, state_dir, temporary, notes, inputs=inputs)


# --- ride matching ---
def _input_sources(settings: RunSettings, job: Job, source: Source, trigger: Trigger, queries: list[QueryPlan],
                   notes: list[str]) -> dict[str, Source]:
    """The source of each second stream a selected output reads (``--rides URI``).

    Without one, a generator run reads the same generator's kind of that name (same seed, start,
    rate); any other run is refused. A stream no selected output reads is never opened for reading.
    """
    sources = {}
    for name, schema in job.inputs.items():
        uri = getattr(settings, name)
        readers = [q.output.name for q in queries if name in q.output.inputs]
        if uri is not None:
            try:
                opened = open_source(uri)  # a bad URI is refused even when nothing reads it
            except ConfigError as exc:
                raise ConfigError(f"--{name}: {exc}") from None
        if not readers:
            if uri is not None:
                notes.append(f"--{name} is read only by {', '.join(o.name for o in job.outputs.values() if name in o.inputs)}, "
                             "which this run does not write: it is not read")
            continue
        if uri is None:
            if not isinstance(source, GeneratorSource):
                raise ConfigError(f"output {readers[0]!r} joins a second stream, {name}: give its source with --{name} URI "
                                  f"(e.g. --{name} 'generator://?kind={name}' or a redis://, kafka://, files:// URI)")
            opened = open_source("generator://?" + urlencode({**source.uri.options, "kind": name}, safe=":"))
        opened.event_schema = schema
        if trigger.realtime:
            raise ConfigError(f"output {readers[0]!r} reads two streams, which real-time mode cannot: use a micro-batch trigger")
        opened.check_plan(readers)
        sources[name] = opened
    given = [name for name in INPUT_SETTINGS if getattr(settings, name) and name not in job.inputs]
    if given:
        raise ConfigError(f"job {job.name!r} reads no second stream {given[0]}: drop --{given[0]}")
    return sources


def _pin_inputs(plan: RunPlan, run_state: dict[str, Any]) -> None:
    """Pin each second stream's source in its own part of the run state.

    A generator given no ``start`` keeps the clock of a generator main source, so both streams'
    event times line up (the default ``--rides`` is that).
    """
    for name, source in plan.inputs.items():
        if (isinstance(source, GeneratorSource) and source.start_ms is None
                and isinstance(plan.source, GeneratorSource)):
            source.start_ms = plan.source.start_ms
        source.pin(run_state.setdefault("inputs", {}).setdefault(name, {}))


# --- speeding incidents (issue 4: incidents) ---
def _check_incidents(params: Params, queries: list[QueryPlan]) -> None:
    """Incident settings that only make sense with the incidents output, in a mode that fits them."""
    if params.incident_initial_state:
        check_initial_state(params.incident_initial_state)
    incidents = next((q for q in queries if q.output.name == "incidents"), None)
    if incidents is not None and params.incident_updates and incidents.mode != "update":
        raise ConfigError("--incident-updates emits an open incident more than once: write it in update mode "
                          "(--output-mode incidents=update) to a sink that replaces rows by key (postgresql, mysql, console)")


def prepare_state(plan: RunPlan) -> None:
    """Create the state directory, pin what must survive restarts, check sinks against checkpoints.

    Runs once per plan: the CLI calls it before starting Spark, ``Run.start`` when nobody has.
    """
    if plan.prepared:
        return
    recorded = read_manifest(plan.state_dir, plan.job.name) or {}
    settings = plan.settings.masked()
    if recorded and has_progress(plan.state_dir):
        note = check_resume(recorded.get("settings", {}), settings, plan.state_dir, plan.settings.allow_changed_settings)
        if note:
            plan.notes.append(note)
    run_state = recorded.get("run_state", {})
    plan.source.check()
    plan.source.pin(run_state)
    for source in plan.inputs.values():
        source.check()
    _pin_inputs(plan, run_state)
    for query in plan.queries:
        check_intact(query.checkpoint, query.output.name)
        query.sink.check(query.output.name, query.fresh)
    with told_when_full(plan.state_dir):
        plan.state_dir.mkdir(parents=True, exist_ok=True)
        write_manifest(plan.state_dir, {"job": plan.job.name, "settings": settings, "run_state": run_state})
    plan.prepared = True


def build_output(spark, plan: RunPlan, output: str, batch: bool = False):
    """The DataFrame of one output: a stream, or with ``batch=True`` the same function on a static read."""
    max_events = plan.settings.max_events

    def read(source: Source):
        return source.read_batch(spark, max_events) if batch else source.read_stream(spark, max_events)

    spec = plan.job.outputs[output]
    # a second stream is read with the same --max-events bound as the main one
    inputs = {name: decode(read(plan.inputs[name]), plan.job.inputs[name]) for name in spec.inputs}
    if spec.dead_letters_of:
        return inputs[spec.dead_letters_of].dead_letters
    raw = read(plan.source)
    # Latency and dead-letter counts come from an observation (see monitor/metrics.py) that Spark
    # computes inside each micro-batch; continuous and real-time mode have no such batches.
    observed = not batch and not (plan.trigger.continuous or plan.trigger.realtime)
    interval_ms = plan.trigger.interval_ms if plan.trigger.kind == "processing" else 0
    decoded = plan.job.decode(raw, observe=OBSERVATION if observed else None,
                              latency_sample=latency_sample(plan.source.batch_rows(interval_ms)))
    if output == "dead-letters":
        return decoded.dead_letters
    df = plan.job.pipeline(decoded.events, plan.params, **inputs)[output]
    per_batch = plan.job.outputs[output].per_batch
    return per_batch(df, 0) if batch and per_batch is not None else df


class PerBatchWriter:
    """A stream writer whose ``foreachBatch`` function receives ``per_batch(batch, batch_id)`` instead of the batch.

    Sinks that write through ``foreachBatch`` (console, databases, Redis) take it unchanged.
    """

    def __init__(self, writer, per_batch: Callable[[Any, int], Any]):
        self._writer, self._per_batch = writer, per_batch

    def foreachBatch(self, write: Callable[[Any, int], None]):  # noqa: N802 — Spark's name
        per_batch = self._per_batch
        return self._writer.foreachBatch(lambda batch, batch_id: write(per_batch(batch, batch_id), batch_id))

    def __getattr__(self, name: str):
        return getattr(self._writer, name)


def _per_batch_schema_frame(spark, df, per_batch):
    """An empty static DataFrame with the columns ``per_batch`` gives (sinks create tables from it)."""
    return per_batch(spark.createDataFrame([], df.schema), 0)


@dataclass
class QuerySummary:
    name: str
    output: str
    sink: str
    guarantee: str
    mode: str
    batches: int
    input_rows: int
    watermark: str | None


@dataclass
class RunSummary:
    queries: list[QuerySummary]
    elapsed_s: float
    state_dir: Path
    stopped_by: str


class Run:
    """A started run: its queries, a stop switch, and what they have done.

    >>> run = Run(spark, plan_run(settings)); run.start(); summary = run.wait()  # doctest: +SKIP
    """

    def __init__(self, spark, plan: RunPlan, on_started: Callable[[Run], None] | None = None):
        self.spark, self.plan = spark, plan
        interval = plan.trigger.interval_ms if plan.trigger.kind == "processing" else 0
        self.tracker = ProgressTracker(interval, plan.source.lag)
        #: the executors running the tasks (a cluster's count, cores and losses); read at most once a second
        self.executors = ExecutorWatch.for_session(spark, on_change=lambda r: save_report(plan.state_dir, r, True))
        self.tracker.subscribe(lambda _: self.executors.poll())
        self.queries: list[Any] = []
        #: queries that serve views (the dashboard's feed), stopped with the run, never waited for
        self.side_queries: list[Any] = []
        self.stop_requested = threading.Event()
        self.force_stop = threading.Event()
        self._started_at = 0.0
        self._reached: dict[str, int] = {}  # per query: the batch that read the --max-events-th event
        self._on_started = on_started

    def start(self) -> None:
        self.plan.lock_state()
        try:
            prepare_state(self.plan)
        except BaseException:
            self.plan.unlock_state()
            raise
        self.plan.source.check_session(self.spark)  # e.g. a connector jar missing from the session
        for source in self.plan.inputs.values():
            source.check_session(self.spark)
        for qp in self.plan.queries:
            qp.sink.check_session(self.spark)
        if not is_local(self.plan.settings.master):
            check_reachable(self.spark, run_places(self.plan))
        if self.plan.trigger.continuous:
            self._share_cores()
        self.spark.streams.addListener(self.tracker)
        self.executors.poll(force=True)
        self._started_at = time.monotonic()
        plan = self.plan
        try:
            for qp in plan.queries:
                # Real-time mode, like continuous mode, runs JVM sinks only (the console sink picks Spark's own).
                jvm_only = plan.trigger.continuous or plan.trigger.realtime
                target = Target(plan.job.name, qp.output.name, qp.name, jvm_only, qp.mode, qp.output.key_in(qp.mode),
                                rejected=str(plan.state_dir / "rejected" / qp.output.name))
                df = qp.sink.records(build_output(self.spark, plan, qp.output.name), target)
                writer = (df.writeStream.queryName(qp.name).outputMode(qp.mode)
                          .option("checkpointLocation", str(qp.checkpoint)))
                writer = plan.trigger.apply(writer)
                if qp.output.per_batch is not None:
                    writer = PerBatchWriter(writer, qp.output.per_batch)
                    df = _per_batch_schema_frame(self.spark, df, qp.output.per_batch)
                query = qp.sink.start(writer, df, target)
                qp.name = query.name  # a sink may name its query (the memory sink names its table so)
                self.queries.append(query)
        except SpeedlayerError:
            self._stop_all()
            self.plan.unlock_state()
            raise
        except Exception as exc:  # Spark refused the query: say why in one line
            self._stop_all()
            self.plan.unlock_state()
            raise QueryFailedError(f"could not start the {plan.job.name} job: {first_line(exc)}") from None
        if self._on_started:
            self._on_started(self)

    def _share_cores(self) -> None:
        """Continuous mode runs one task per source partition for good: the queries must fit the cores."""
        cores, queries = self.spark.sparkContext.defaultParallelism, len(self.plan.queries)
        if cores < queries:
            raise ConfigError(f"continuous mode keeps a task running per query and source partition: {queries} queries "
                              f"need at least {queries} cores, this session has {cores}: "
                              f"use --master local[{queries}] or select fewer outputs")
        self.plan.source.limit_partitions(cores // queries)

    def start_and_wait(self) -> RunSummary:
        """Start, then wait for the end (for bounded runs and tests)."""
        self.start()
        return self.wait()

    def _bounded_done(self, query: Any) -> bool:
        """Whether a --max-events query has read its last event and flushed its windows.

        Reads the query's own last progress, not the listener's: the listener bus lags by seconds
        when finished queries run empty batches back to back. The first batch seen with all events
        read stands for the one that read the last event (it is that one or a later one).
        """
        max_events = self.plan.settings.max_events
        last = query.lastProgress
        if max_events is None or last is None:
            return False
        reached = self._reached.get(query.name)
        if reached is None:
            sources = last["sources"] or []
            # a query's first source is its main stream (a join lists the pings' side first)
            output = next((q.output for q in self.plan.queries if q.name == query.name), None)
            first = self.plan.first_source(output) if output is not None else self.plan.source
            read = first.events_read(json.loads(sources[0].json)) if sources else None
            if read is None or read < max_events:
                return False
            reached = self._reached[query.name] = last["batchId"]
        return last["batchId"] >= reached + FLUSH_BATCHES

    def wait(self) -> RunSummary:
        """Block until the run ends (bounded input done, --duration over, stop requested, or failure)."""
        settings = self.plan.settings
        deadline = self._started_at + settings.duration if settings.duration else None
        stopped_by = "end of input"
        try:
            while True:
                failed = next((q for q in self.queries if not q.isActive and q.exception() is not None), None)
                if failed is not None:
                    line = first_line(failed.exception(), self.written_places().get(failed.name, ()))
                    raise QueryFailedError(f"query {failed.name} failed: {line}")
                if all(not q.isActive for q in self.queries):
                    break
                if self.stop_requested.is_set():
                    stopped_by = "stop requested"
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    stopped_by = f"--duration {settings.duration:g}s"
                    break
                if settings.max_events and all(self._bounded_done(q) for q in self.queries):
                    stopped_by = f"--max-events {settings.max_events}"
                    break
                time.sleep(0.2)
        finally:
            stop_errors = self._stop_all()
            save_report(self.plan.state_dir, self.executors.poll(force=True), running=False)
            self.plan.unlock_state()
        raise_if_failed_while_stopping(self.queries, stop_errors, stopped_by, self.written_places())
        summary = self.summary(stopped_by)
        if self.plan.state_dir.is_dir():
            with told_when_full(self.plan.state_dir):
                (self.plan.state_dir / LAST_RUN).write_text(json.dumps(dataclasses.asdict(summary), indent=2, default=str))
        return summary

    def written_places(self) -> dict[str, list[Path]]:
        """By query name, the directories it writes to: its checkpoint, and a file sink's path."""
        return {qp.name: [qp.checkpoint, *([Path(qp.sink.path)] if getattr(qp.sink, "path", None) else [])]
                for qp in self.plan.queries}

    def _stop_all(self) -> dict[str, BaseException]:
        """Stop the queries after their in-flight batch (the dashboard's side queries too, so the batch a
        bounded run ends with reaches its views); returns what ``stop()`` raised, by query name."""
        immediate = self.plan.trigger.continuous or self.plan.trigger.realtime
        errors = stop_after_batch([*self.side_queries, *self.queries], immediate, self.force_stop)
        # The listener bus delivers progress reports late: the summary must hold the last batches.
        self.tracker.wait_terminated([q.name for q in self.queries])
        try:
            self.spark.streams.removeListener(self.tracker)
        except Exception:  # noqa: BLE001
            pass
        return errors

    def summary(self, stopped_by: str) -> RunSummary:
        rows = []
        for qp in self.plan.queries:
            progress = self.tracker.get(qp.name)
            rows.append(QuerySummary(
                qp.name, qp.output.name, qp.sink.describe(), qp.sink.guarantee, qp.mode,
                progress.batches if progress else 0, progress.input_rows if progress else 0,
                progress.watermark if progress else None,
            ))
        return RunSummary(rows, time.monotonic() - self._started_at, self.plan.state_dir, stopped_by)

    def cleanup(self) -> None:
        """Release the state directory and remove it if it is temporary."""
        self.plan.unlock_state()
        if self.plan.temporary_state:
            shutil.rmtree(self.plan.state_dir, ignore_errors=True)
