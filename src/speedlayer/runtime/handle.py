"""``speedlayer.run``: a job started from Python (a notebook, a scheduler, a test), and its handle.

The run is planned, checked and prepared exactly as ``speedlayer run`` does it (``plan_run``, then
the runner, ``Run``). ``run`` starts the queries and returns at once; a thread watches them
the way the CLI does (end of bounded input, ``duration``, ``max_events``, a failure) and stops
every query after its batch.

>>> with run("fleet", sinks={"windows": "memory:windows"}, max_events=10_000, spark=spark) as handle:  # doctest: +SKIP
...     summary = handle.wait()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from speedlayer.core.errors import ConfigError
from speedlayer.pipelines.base import Job
from speedlayer.runtime.plan import RunPlan, plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.session import build_session
from speedlayer.runtime.settings import build_settings
from speedlayer.runtime.summary import RunSummary

log = logging.getLogger("speedlayer.run")


@dataclass(frozen=True)
class QueryStatus:
    """What one output's query has done so far (from the run's progress reports)."""

    output: str
    query: str
    active: bool
    batches: int
    input_rows: int
    #: the newest batch reported (-1 before the first)
    last_batch_id: int
    watermark: str | None


class RunHandle:
    """A started run: ``wait``, ``stop``, ``status``, ``summary``; ``with`` stops it on exit.

    >>> handle = run("fleet", max_events=1_000, spark=spark); handle.wait().stopped_by  # doctest: +SKIP
    '--max-events 1000'
    """

    def __init__(self, started: Run, owns_session: bool):
        self._run, self._owns_session = started, owns_session
        self._summary: RunSummary | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name=f"speedlayer-{started.plan.job.name}", daemon=True)
        self._watcher.start()

    @property
    def plan(self) -> RunPlan:
        """What was planned: the job, source, sinks, modes, checkpoints, notes."""
        return self._run.plan

    @property
    def spark(self):
        """The run's SparkSession (stopped when the run ends if ``run`` built it)."""
        return self._run.spark

    @property
    def queries(self) -> list[Any]:
        """The run's StreamingQuery objects, one per output."""
        return list(self._run.queries)

    @property
    def summary(self) -> RunSummary | None:
        """What the run did, once it has ended (None while it runs, or if it failed)."""
        return self._summary

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    def _watch(self) -> None:
        try:
            self._summary = self._run.wait()
        except BaseException as exc:  # noqa: BLE001 — handed to whoever waits
            self._error = exc
        finally:
            try:
                self._run.cleanup()
                if self._owns_session:
                    self._run.spark.stop()
            finally:
                self._done.set()

    def wait(self, timeout: float | None = None) -> RunSummary:
        """Block until the run ends and return its summary; a failed query raises QueryFailedError.

        With ``timeout`` (seconds) a run still going by then raises TimeoutError and keeps running.
        """
        try:
            ended = self._done.wait(timeout)
        except KeyboardInterrupt:
            self._run.stop_requested.set()  # Ctrl-C in a notebook: stop after the batch, as the CLI does
            raise
        if not ended:
            raise TimeoutError(f"the {self.plan.job.name} run is still running after {timeout:g}s: wait longer, or stop() it")
        if self._error is not None:
            raise self._error
        assert self._summary is not None
        return self._summary

    def stop(self, timeout: float | None = None) -> RunSummary:
        """Stop gracefully (each query finishes its batch and commits it), then return the summary."""
        self._run.stop_requested.set()
        return self.wait(timeout)

    def process_all_available(self) -> None:
        """Block until every query has processed all the input available now (Spark's processAllAvailable;
        for tests). A query that fails meanwhile raises the run's QueryFailedError."""
        for query in self.queries:
            try:
                query.processAllAvailable()
            except Exception:
                self.wait()  # the watcher turns the query's failure into the run's error
                raise

    def status(self) -> dict[str, QueryStatus]:
        """Output name -> what its query has done so far."""
        result, started = {}, {query.name: query for query in self.queries}
        for qp in self.plan.queries:
            progress, query = self._run.tracker.get(qp.name), started.get(qp.name)
            result[qp.output.name] = QueryStatus(
                qp.output.name, qp.name, self.running and query is not None and query.isActive,
                progress.batches if progress else 0, progress.input_rows if progress else 0,
                progress.last_batch_id if progress else -1, progress.watermark if progress else None)
        return result

    def __enter__(self) -> RunHandle:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.stop()
        except Exception:
            if exc_type is None:
                raise  # otherwise the error that left the block is the one to see

    def __repr__(self) -> str:
        state = "running" if self.running else ("failed" if self._error else "ended")
        return f"<RunHandle {self.plan.job.name} {state}: {', '.join(dict.fromkeys(q.name for q in self.plan.queries))}>"


def run(job: str | Job, source: str | None = None, sinks: Mapping[str, str] | None = None, trigger: str | None = None,
        spark=None, **settings: Any) -> RunHandle:
    """Plan, check and start a job exactly as ``speedlayer run`` does; return its handle without blocking.

    ``job`` is a registered name, a ``module:attribute`` reference or a Job object (registered or
    not); ``settings`` are the other run settings, named as in a config file (``state_dir``,
    ``max_events``, ``duration``, ``output_mode``, ``watermark``, ``options``, ``conf``, ``master``, ...).
    Without ``spark``, the active session is used (and left running), else the CLI's session is
    built, and stopped when the run ends.

    >>> handle = run(ORDERS, source="files:///landing/orders", sinks={"big": "parquet:out/big"},  # doctest: +SKIP
    ...              trigger="available-now", state_dir="state/orders")
    >>> handle.wait().queries[0].input_rows  # doctest: +SKIP
    1200
    """
    given = job if isinstance(job, Job) else None
    if sinks is not None and not isinstance(sinks, Mapping):
        raise ConfigError(f"sinks takes a dict of output name -> sink URI, e.g. {{'windows': 'memory:w'}}, "
                          f"not {type(sinks).__name__} {sinks!r}"[:300])
    values = {"job": given.name if given else job, "source": source, "sinks": dict(sinks or {}), "trigger": trigger,
              **settings}
    started = Run(None, plan_run(build_settings({}, values), given))
    started.prepare()  # as the CLI does, before Spark: a second run on this state directory stops here
    for note in started.notes:
        log.info("speedlayer: %s", note)
    try:
        session, owned = _session(spark, started.plan)
    except BaseException:
        started.cleanup()
        raise
    try:
        started.start(session)
    except BaseException:
        if owned:
            session.stop()
        raise
    return RunHandle(started, owned)


def _session(spark, plan: RunPlan) -> tuple[Any, bool]:
    """(session, whether the run owns it): the one given, else the active one, else the CLI's, built now."""
    if spark is not None:
        return spark, False
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    settings = plan.settings
    if active is not None:
        if {"master", "conf"} & settings.model_fields_set:
            raise ConfigError(f"a SparkSession is already running here ({active.sparkContext.master}), so master and "
                              "conf cannot apply: drop them, or stop that session first")
        return active, False
    session = build_session(settings.master, settings.spark_conf(), app_name=f"speedlayer-{plan.job.name}",
                            log_file=plan.state_dir / "spark.log", spark_ui=settings.spark_ui, ship=settings.ship,
                            packages=plan.spark_packages(), connector_conf=plan.spark_conf(),
                            announce=lambda line: log.info("speedlayer: %s", line))
    return session, True

