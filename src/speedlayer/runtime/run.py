"""The runner: one owner of a run, from its state directory's lock to its clean-up.

``Run`` prepares a ``RunPlan`` (``speedlayer.runtime.plan``): it locks the state directory and
checks and records it (``speedlayer.runtime.run_state``); it starts the plan's queries, one per
output or the job's shared query for the outputs that share one (``speedlayer.runtime.shared``),
each with its own checkpoint; it waits for the end (bounded input, --duration, a stop request or
a failure), stops the queries after their batch, releases the lock and removes a temporary state
directory. The CLI, ``speedlayer.run``, the testing kit and the bench are its clients; monitors
subscribe to its ``tracker``. ``speedlayer.runtime.build`` wires source -> decode -> pipeline.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from speedlayer.core.errors import ConfigError, QueryFailedError, SpeedlayerError
from speedlayer.core.modes import APPEND
from speedlayer.core.sizes import parse_size
from speedlayer.runtime.bounds import MAX_MEMORY_MB, BoundsWatch
from speedlayer.runtime.build import PerBatchWriter, build_outputs, per_batch_schema_frame, writing_per_batch
from speedlayer.runtime.checkpoints import ready_checkpoint
from speedlayer.runtime.executors import ExecutorWatch, save_report
from speedlayer.runtime.low_latency import share_cores, stateless_conf
from speedlayer.runtime.plan import QueryPlan, RunPlan
from speedlayer.runtime.progress import ProgressTracker
from speedlayer.runtime.reach import check_reachable, run_places
from speedlayer.runtime.run_state import RunState, lock_and_prepare, remove_temporary_state
from speedlayer.runtime.session import is_local
from speedlayer.runtime.shared import SHARED_QUERY_CONF, FanOut, check_shareable, pack_outputs, session_conf
from speedlayer.runtime.sql_endpoint import SCHEDULER_POOL, STREAMS_POOL
from speedlayer.runtime.stopping import first_line, raise_if_failed_while_stopping, restartable, stop_after_batch
from speedlayer.runtime.streamable import check_streamable, keeps_state
from speedlayer.runtime.summary import RunSummary, save_summary, summarise
from speedlayer.sinks.base import Target

log = logging.getLogger("speedlayer.run")

#: times one query is restarted after failures that are no fault of its own (stopping.RESTARTABLE)
RESTARTS = 3
#: batches a bounded (--max-events) query runs after its last event, so the watermark can close windows
FLUSH_BATCHES = 2


class Run:
    """A run of a plan: prepared, started, waited for, cleaned up; its queries, a stop switch, and
    what they have done.

    ``prepare()`` locks and checks the state directory (``start`` does it when nobody has), so a
    client that must refuse early (the CLI, before Spark starts) calls it first; every failure from
    there releases what was taken. ``cleanup()`` releases the lock and removes a temporary state
    directory; ``with Run(...)`` calls it on exit.

    >>> with Run(spark, plan_run(settings)) as run:  # doctest: +SKIP
    ...     run.start(); summary = run.wait()
    """

    def __init__(self, spark, plan: RunPlan, on_started: Callable[[Run], None] | None = None,
                 notify: Callable[[str], None] | None = None):
        self.spark, self.plan = spark, plan
        #: the state directory's lock and manifest, once ``prepare`` has taken them
        self.state: RunState | None = None
        #: the outputs as they run: a job file's learn whether they keep state from their query plan
        self.outputs = {qp.output.name: qp.output for qp in plan.queries}
        interval = plan.trigger.interval_ms if plan.trigger.kind == "processing" else 0
        self.tracker = ProgressTracker(interval, plan.source.lag)
        #: the executors running the tasks (a cluster's count, cores and losses); read at most once a second
        self.executors = self._executor_watch()
        self.tracker.subscribe(lambda _: self.executors.poll())
        self.tracker.subscribe(self._batch_committed)
        self._notify = notify or (lambda line: log.warning("speedlayer: %s", line))
        self.bounds = _bounds_watch(plan, self._notify)
        self.tracker.subscribe(self.bounds.batch_committed)
        self.queries: list[Any] = []
        #: queries that serve views (the dashboard's feed), stopped with the run, never waited for
        self.side_queries: list[Any] = []
        self.stop_requested = threading.Event()
        #: what asked for the stop, as the summary's "stopped by" says it (the CLI names the signal)
        self.stop_reason = "stop requested"
        self.force_stop = threading.Event()
        self._started_at = 0.0
        self._reached: dict[str, int] = {}  # per query: the batch that read the --max-events-th event
        #: bounded queries stopped as soon as they flushed, and what stopping them raised (by query name)
        self._flushed: set[str] = set()
        self._early_stop_errors: dict[str, BaseException] = {}
        #: called once every query has started (the CLI attaches its views there)
        self.on_started = on_started
        self._starters: dict[str, Callable[[], Any]] = {}  # by query name: starts it again (see _restarted)
        self._restarts: dict[str, int] = {}

    def _batch_committed(self, metrics: Any) -> None:
        """Tell the sources what a batch read (on the listener's thread, after the batch committed)."""
        progress = self.tracker.get(metrics.query)
        if progress is None or not progress.sources:
            return
        for source in {id(s): s for s in (self.plan.source, *self.plan.inputs.values())}.values():
            source.batch_committed(metrics.query, progress.sources)

    def _executor_watch(self) -> ExecutorWatch:
        state_dir = self.plan.state_dir
        return ExecutorWatch.for_session(self.spark, on_change=lambda r: save_report(state_dir, r, True))

    @property
    def notes(self) -> list[str]:
        """What a user reads before the run: the plan's notes, then the preparation's."""
        return [*self.plan.notes, *(self.state.notes if self.state else [])]

    def prepare(self) -> None:
        """Lock the state directory, check it against the plan and record the run (once); a refusal
        releases the lock and removes a temporary state directory."""
        if self.state is None:
            self.state = lock_and_prepare(self.plan)

    def start(self, spark=None) -> None:
        """Prepare if nobody has, then start every query (in ``spark``, when the run was made without
        a session). A query Spark refuses stops the others and cleans up, in one line."""
        if spark is not None and spark is not self.spark:
            self.spark = spark
            self.executors = self._executor_watch()
        self.prepare()
        try:
            self._start()
        except BaseException:
            self.cleanup()
            raise

    def _start(self) -> None:
        self.plan.source.check_session(self.spark)  # e.g. a connector jar missing from the session
        for source in self.plan.inputs.values():
            source.check_session(self.spark)
        for qp in self.plan.queries:
            qp.sink.check_session(self.spark)
        for path in self.plan.py_files:  # the job's own code, for the Python workers (code_shipping)
            self.spark.sparkContext.addPyFile(str(path))
        if not is_local(self.plan.settings.master):
            check_reachable(self.spark, run_places(self.plan))
        if self.plan.trigger.stateless:
            share_cores(self.spark, self.plan)
        self.spark.streams.addListener(self.tracker)
        self.spark.sparkContext.setLocalProperty(SCHEDULER_POOL, STREAMS_POOL)  # ad-hoc SQL runs in another
        self.executors.poll(force=True)
        self.state.pin_at_start()
        self._started_at = time.monotonic()
        plan = self.plan
        try:
            built = [b for qp in plan.queries if not qp.shared for b in self._build([qp])]
            shared = self._build([qp for qp in plan.queries if qp.shared])
            # Spark checks a query against its mode only when it starts: every query is checked before the first does
            for qp, df, _ in built + shared:
                check_streamable(df, qp.output, qp.mode, plan.trigger.continuous, qp.sink.modes)
                if qp.output.stateful is None:  # a job file's output: its plan tells
                    self.outputs[qp.output.name] = dataclasses.replace(qp.output, stateful=keeps_state(df))
            for qp, df, _ in shared:
                check_shareable(df, qp.output)
            for qp, df, target in built:
                self.queries.append(self._start_query(qp, df, target))
            if shared:
                self.queries.append(self._start_shared(shared))
        except SpeedlayerError:
            self._stop_all()
            raise
        except Exception as exc:  # Spark refused the query: say why in one line
            self._stop_all()
            raise QueryFailedError(f"could not start the {plan.job.name} job: {first_line(exc)}") from exc
        if self.on_started:
            self.on_started(self)

    def _build(self, queries: list[QueryPlan]) -> list[tuple[QueryPlan, Any, Target]]:
        """The DataFrame each planned output writes, as its sink takes it, and what the sink is told
        (outputs built together share one read and decode of the source)."""
        if not queries:
            return []
        plan = self.plan
        from pyspark.errors import AnalysisException

        try:
            frames = build_outputs(self.spark, plan, [qp.output.name for qp in queries])
        except AnalysisException as exc:  # the job's own code asks for what its input does not have
            pipeline, names = plan.job.pipeline, ", ".join(repr(qp.output.name) for qp in queries)
            raise ConfigError(f"output {names} of job '{plan.job.name}': {first_line(exc)}: fix the job's "
                              f"pipeline ({pipeline.__module__}.{pipeline.__qualname__})") from exc
        return [(qp, qp.sink.records(frames[qp.output.name], target), target)
                for qp in queries for target in [self._target(qp)]]

    def _target(self, qp: QueryPlan) -> Target:
        plan = self.plan
        jvm_only = plan.trigger.continuous or plan.trigger.realtime
        return Target(plan.job.name, qp.output.name, qp.name, jvm_only, qp.mode, qp.output.key_in(qp.mode),
                      rejected=str(plan.state_dir / "rejected" / qp.output.name), fresh_checkpoint=qp.fresh)

    def _writer(self, df: Any, name: str, mode: str, checkpoint: Path) -> Any:
        writer = df.writeStream.queryName(name).outputMode(mode).option("checkpointLocation", str(checkpoint))
        return self.plan.trigger.apply(writer)

    def _start_query(self, qp: QueryPlan, df: Any, target: Target) -> Any:
        ready_checkpoint(self.plan.source, qp.checkpoint, qp.fresh, df, self.plan.trigger.stateless)
        writer = self._writer(df, qp.name, qp.mode, qp.checkpoint)
        if qp.output.per_batch is not None:
            writer = PerBatchWriter(writer, qp.output.per_batch)
            df = per_batch_schema_frame(self.spark, df, qp.output.per_batch)
        with session_conf(self.spark, stateless_conf(self.spark) if self.plan.trigger.stateless else {}):
            query = qp.sink.start(writer, df, target)
        # a restart's target is made again: its checkpoint is no longer fresh (the run's own rows are in the sink)
        self._starters[query.name] = lambda: self._restart([qp], lambda: self._start_query(qp, df, self._target(qp)))
        return query

    def _start_shared(self, built: list[tuple[QueryPlan, Any, Target]]) -> Any:
        """Start the job's shared query (``speedlayer.runtime.shared``): one read, each output to its sink."""
        writers = {}
        for qp, df, target in built:
            per_batch = qp.output.per_batch
            if per_batch is None:
                writers[qp.output.name] = qp.sink.batch_function(df.schema, target)
            else:
                write = qp.sink.batch_function(per_batch_schema_frame(self.spark, df, per_batch).schema, target)
                writers[qp.output.name] = writing_per_batch(write, per_batch)
        first = built[0][0]
        packed = pack_outputs({qp.output.name: df for qp, df, _ in built})
        ready_checkpoint(self.plan.source, first.checkpoint, first.fresh, packed, self.plan.trigger.stateless)
        with session_conf(self.spark, SHARED_QUERY_CONF):
            query = self._writer(packed, first.name, APPEND, first.checkpoint).foreachBatch(FanOut(writers)).start()
        self._starters[query.name] = lambda: self._restart(
            [qp for qp, _, _ in built], lambda: self._start_shared([(qp, df, self._target(qp)) for qp, df, _ in built]))
        return query

    def _restart(self, queries: list[QueryPlan], start: Callable[[], Any]) -> Any:
        # checked again: what the sinks find (rows in a table) is now this run's own, from the checkpoint
        for qp in queries:
            qp.sink.check(qp.output.name, qp.fresh)
        return start()

    def add_side_query(self, query: Any, restart: Callable[[], Any]) -> None:
        """Keep a started query that serves a view (the dashboard's tap): stopped with the run, never
        waited for; ``restart()`` starts it again after a failure no fault of its own (see ``_restarted``)."""
        self.side_queries.append(query)
        self._starters[query.name] = restart

    def _restarted(self, query: Any) -> bool:
        """Restart a query whose failure was no fault of its own (a machine too busy to start a Python
        worker in time, an executor lost mid-batch); it resumes from its checkpoint, as after any restart."""
        name, done = query.name, self._restarts.get(query.name, 0)
        why = restartable(query.exception())
        if done >= RESTARTS or name not in self._starters or self.stop_requested.is_set() or why is None:
            return False
        self._restarts[name] = done + 1
        self._notify(f"query {name} failed: {why}; restarting it from its checkpoint ({done + 1}/{RESTARTS})")
        queries = self.queries if query in self.queries else self.side_queries
        queries.remove(query)
        try:
            restarted = self._starters[name]()
        except Exception as exc:  # Spark refused the query this time: say why in one line
            raise QueryFailedError(f"query {name} could not be restarted: {first_line(exc)}") from exc
        if restarted is not None:
            queries.append(restarted)
        return True

    def start_and_wait(self) -> RunSummary:
        """Start, then wait for the end, then clean up (for bounded runs and tests)."""
        with self:
            self.start()
            return self.wait()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

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

    def _stop_flushed(self) -> bool:
        """Stop each bounded query that has read its last event and flushed its windows (its batches from
        here on would be empty, and take the cores the others still need); whether every query is done."""
        for query in self._unflushed():
            if query.isActive and self._bounded_done(query):
                self._early_stop_errors.update(stop_after_batch([query], False, self.force_stop))
                self._flushed.add(query.name)
        return not self._unflushed()

    def _unflushed(self) -> list:  # those flushed answer for their stop in _early_stop_errors
        return [q for q in self.queries if q.name not in self._flushed]

    def wait(self) -> RunSummary:
        """Block until the run ends (bounded input done, --duration over, stop requested, or failure)."""
        settings = self.plan.settings
        deadline = self._started_at + settings.duration if settings.duration else None
        stopped_by = "end of input"
        try:
            while True:
                failed = next((q for q in self._unflushed() if not q.isActive and q.exception() is not None), None)
                if failed is not None and self._restarted(failed):
                    continue
                for side in [q for q in self.side_queries if not q.isActive and q.exception() is not None]:
                    self._restarted(side)
                if failed is not None:
                    error = failed.exception()
                    line = first_line(error, self.written_places().get(failed.name, ()), self.plan.explain_failure)
                    raise QueryFailedError(f"query {failed.name} failed: {line}") from error
                if settings.max_events and self._stop_flushed():
                    stopped_by = f"--max-events {settings.max_events}"
                    break
                if all(not q.isActive for q in self.queries):
                    if any(q.exception() is not None for q in self._unflushed()):
                        continue  # one ended since the check above: restart it or fail the run there
                    break
                if self.stop_requested.is_set():
                    stopped_by = self.stop_reason
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    stopped_by = f"--duration {settings.duration:g}s"
                    break
                time.sleep(0.2)
        finally:
            stop_errors = {**self._early_stop_errors, **self._stop_all()}
            save_report(self.plan.state_dir, self.executors.poll(force=True), running=False)
            if self.state is not None:
                self.state.release()
        raise_if_failed_while_stopping(self.queries, stop_errors, stopped_by, self.written_places(),
                                       self.plan.explain_failure)
        summary = self.summary(stopped_by)
        save_summary(summary)
        return summary

    def written_places(self) -> dict[str, list[Path]]:
        """By query name, the directories it writes to: its checkpoint, and a file sink's path."""
        places: dict[str, list[Path]] = {}
        for qp in self.plan.queries:
            found = places.setdefault(qp.name, [qp.checkpoint])
            found.extend([Path(qp.sink.path)] if getattr(qp.sink, "path", None) else [])
        return places

    def _stop_all(self) -> dict[str, BaseException]:
        """Stop the queries after their in-flight batch (the dashboard's side queries too, so the batch a
        bounded run ends with reaches its views); returns what ``stop()`` raised, by query name."""
        immediate = self.plan.trigger.continuous or self.plan.trigger.realtime
        errors = stop_after_batch([*self.side_queries, *self._unflushed()], immediate, self.force_stop)
        # The listener bus delivers progress reports late: the summary must hold the last batches.
        self.tracker.wait_terminated([q.name for q in self.queries])
        try:
            self.spark.streams.removeListener(self.tracker)
        except Exception:  # noqa: BLE001
            pass
        return errors

    def summary(self, stopped_by: str) -> RunSummary:
        return summarise(self.plan, self.tracker, stopped_by, time.monotonic() - self._started_at)

    def cleanup(self) -> None:
        """Release the state directory and remove it if it is temporary (idempotent)."""
        if self.state is not None:
            self.state.release()
        remove_temporary_state(self.plan)


def _bounds_watch(plan: RunPlan, notify: Callable[[str], None]) -> BoundsWatch:
    """The watch over the run's checkpoints (--max-checkpoint-size) and state memory: the bound the
    session has (--max-state-memory, or the user's --conf of Spark's setting)."""
    settings = plan.settings
    checkpoint_bound = parse_size(settings.max_checkpoint_size) if settings.max_checkpoint_size else None
    conf = settings.spark_conf()
    memory_bound: int | None = None
    if "max_state_memory" in settings.model_fields_set or MAX_MEMORY_MB in settings.conf:  # a bound the user set
        try:
            memory_bound = int(conf[MAX_MEMORY_MB]) << 20
        except ValueError:  # the user's --conf: Spark says what is wrong with it
            pass
    return BoundsWatch([qp.checkpoint for qp in plan.queries], checkpoint_bound, memory_bound, notify)
