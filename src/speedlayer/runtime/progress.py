"""A StreamingQueryListener that keeps the progress of every query, for views, metrics and stop rules.

Everything here is pushed by Spark's listener bus after each batch; nothing polls. Subscribers
(``subscribe``) are called with each batch's ``BatchMetrics``; a failing subscriber is logged and
never disturbs the run.

The tracker takes Spark's events through a bridge of its own (``_ProgressBridge``) that reads a
progress report as one JSON string: PySpark's own bridge turns each report into Python objects
getter by getter, dozens of Py4J calls per batch whose class look-ups scan every jar on the
classpath, and that cost about 4% of the JVM's CPU on the fleet job (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from speedlayer.runtime.metrics import BatchMetrics, batch_metrics

log = logging.getLogger("speedlayer.monitor")

#: batches of history kept per query (timelines and histograms)
HISTORY = 240
#: upper bounds (seconds) of the batch-duration histogram buckets
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, float("inf"))


@dataclass
class QueryProgress:
    """What one query has done so far, as reported by Spark after each batch."""

    name: str
    batches: int = 0
    last_batch_id: int = -1
    input_rows: int = 0
    input_rate: float = 0.0
    processing_rate: float = 0.0
    batch_ms: int = 0
    watermark: str | None = None
    sources: list[dict[str, Any]] = field(default_factory=list)
    history: deque = field(default_factory=lambda: deque(maxlen=120))
    #: derived per-batch metrics, newest last
    metrics: deque = field(default_factory=lambda: deque(maxlen=HISTORY))
    #: running totals (Prometheus counters); "output_rows" only once Spark has counted the sink's rows
    totals: dict[str, int] = field(default_factory=lambda: {
        "dropped_by_watermark": 0, "duplicates_removed": 0, "dead_letters": 0, "late_events_kept": 0})
    #: batch-duration histogram: counts per bucket of DURATION_BUCKETS, and the sum in seconds
    duration_counts: list[int] = field(default_factory=lambda: [0] * len(DURATION_BUCKETS))
    duration_sum_s: float = 0.0
    max_event_ms: int | None = None
    #: Spark has reported the query's end (every progress report of it has arrived before)
    terminated: bool = False
    error: str | None = None

    #: the newest batch that read events (a bounded or idle stream ends with empty batches)
    last_with_events: BatchMetrics | None = None

    @property
    def latest(self) -> BatchMetrics | None:
        return self.metrics[-1] if self.metrics else None

    @property
    def latency_ms(self) -> dict[str, dict[str, int]]:
        """Latency percentiles of the newest batch that read events ({} before any)."""
        return self.last_with_events.latency_ms if self.last_with_events is not None else {}

    @property
    def leading_latency(self) -> tuple[str, dict[str, int]]:
        """The latency a user looks at first: since ingest where the source stamps it (a Kafka record's
        timestamp), else since the event (which includes the producer's own delay and disorder).

        >>> QueryProgress("q").leading_latency
        ('ingest', {})
        """
        latency = self.latency_ms
        if latency.get("ingest") or not latency.get("event"):
            return "ingest", latency.get("ingest", {})
        return "event", latency["event"]


class _ProgressBridge:
    """The Java side's listener calls this (Py4J); it hands the tracker each event with a few calls."""

    def __init__(self, tracker: ProgressTracker) -> None:
        self.tracker = tracker

    def onQueryStarted(self, jevent: Any) -> None:
        self.tracker.started(jevent.id().toString(), jevent.name())

    def onQueryProgress(self, jevent: Any) -> None:
        self.tracker.record(json.loads(jevent.progress().json()))

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        exception = jevent.exception()
        self.tracker.terminated(jevent.id().toString(), exception.get() if exception.isDefined() else None)

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class ProgressTracker(StreamingQueryListener):
    """Collects ``onQueryProgress`` events per query name (thread-safe).

    ``interval_ms`` is the trigger interval (for the scheduling delay); ``source_lag`` turns one
    entry of a progress report's ``sources`` into entries waiting beyond it (None when unknown).
    """

    def __init__(self, interval_ms: int = 0, source_lag: Callable[[dict], int | None] | None = None) -> None:
        self._lock = threading.Condition()
        self._queries: dict[str, QueryProgress] = {}
        self._names: dict[str, str] = {}  # query id -> name (the termination event carries no name)
        self._current: dict[str, str] = {}  # name -> id of its latest start (a query may be restarted)
        self.interval_ms = interval_ms
        self.source_lag = source_lag
        self._subscribers: list[Callable[[BatchMetrics], None]] = []

    def subscribe(self, callback: Callable[[BatchMetrics], None]) -> None:
        """Call ``callback(metrics)`` after each batch of any query (on the listener's thread)."""
        self._subscribers.append(callback)

    @property
    def _jlistener(self) -> Any:
        """What ``spark.streams.addListener`` registers: Spark's wrapper around our lighter bridge."""
        if not hasattr(self, "_jlistenerobj"):
            from pyspark import SparkContext

            self._jlistenerobj = SparkContext._jvm.PythonStreamingQueryListenerWrapper(_ProgressBridge(self))
        return self._jlistenerobj

    def started(self, query_id: str, name: str | None) -> None:
        """A query started (its progress reports will carry ``name``)."""
        name = name or query_id
        with self._lock:
            self._names[query_id] = name
            self._current[name] = query_id
            known = self._queries.get(name)
            if known is not None:  # restarted in the same run: its batches so far count
                known.terminated, known.error = False, None
            else:
                self._queries[name] = QueryProgress(name)

    def terminated(self, query_id: str, exception: str | None = None) -> None:
        """A query ended; every progress report of it has been recorded before this."""
        with self._lock:
            name = self._names.get(query_id, query_id)
            query = self._queries.get(name)
            if query is not None and self._current.get(name, query_id) == query_id:  # not a restarted query's end
                query.terminated = True
                if exception:
                    query.error = exception.strip().splitlines()[0][:400]
            self._lock.notify_all()

    # PySpark's listener interface, for callers that hand the tracker PySpark's own events
    def onQueryStarted(self, event: Any) -> None:
        self.started(str(event.id), event.name)

    def onQueryProgress(self, event: Any) -> None:
        self.record(json.loads(event.progress.json))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        self.terminated(str(event.id), getattr(event, "exception", None))

    def wait_terminated(self, names: list[str], timeout: float = 5.0) -> bool:
        """Wait until Spark has delivered the end (and so every progress report) of these stopped queries."""
        with self._lock:
            return self._lock.wait_for(
                lambda: all(q is None or q.terminated for q in map(self._queries.get, names)), timeout)

    def _lag(self, sources: list[dict[str, Any]]) -> int | None:
        if self.source_lag is None or not sources:
            return None
        try:
            lags = [self.source_lag(s) for s in sources]
        except Exception as exc:  # noqa: BLE001 — a metric must never stop the run
            log.debug("source lag unavailable: %s", exc)
            return None
        return None if any(lag is None for lag in lags) else sum(lags)  # type: ignore[misc]

    def record(self, progress: dict[str, Any]) -> BatchMetrics:
        """Take in one progress report (the JSON form of ``StreamingQueryProgress``)."""
        name = progress.get("name") or progress.get("id")
        lag = self._lag(progress.get("sources") or [])
        with self._lock:
            q = self._queries.setdefault(name, QueryProgress(name))
            m = batch_metrics(progress, q.latest, self.interval_ms, q.max_event_ms)
            m.source_lag = lag
            q.batches += 1
            q.last_batch_id = max(q.last_batch_id, m.batch_id)
            q.input_rows += m.records_read
            q.input_rate, q.processing_rate, q.batch_ms = m.input_rate, m.processing_rate, m.batch_ms
            if m.watermark_ms:  # Spark reports 1970 until the first event
                q.watermark = (progress.get("eventTime") or {})["watermark"]
            q.sources = progress.get("sources") or []
            q.max_event_ms = m.max_event_ms
            q.history.append(progress)
            q.metrics.append(m)
            if m.latency_ms:
                q.last_with_events = m
            if m.output_rows is not None:  # Spark counts its own sinks' rows, not a foreachBatch function's
                q.totals["output_rows"] = q.totals.get("output_rows", 0) + m.output_rows
            q.totals["dropped_by_watermark"] += m.dropped_by_watermark
            q.totals["duplicates_removed"] += m.duplicates_removed
            q.totals["dead_letters"] += m.dead_letters or 0
            q.totals["late_events_kept"] += m.late_events_kept or 0
            seconds = m.batch_ms / 1000
            q.duration_sum_s += seconds
            q.duration_counts[next(i for i, b in enumerate(DURATION_BUCKETS) if seconds <= b)] += 1
        for callback in list(self._subscribers):
            try:
                callback(m)
            except Exception as exc:  # noqa: BLE001 — a view or exporter failing never stops the job
                log.warning("speedlayer: a progress subscriber failed: %s", exc)
        return m

    def get(self, name: str) -> QueryProgress | None:
        with self._lock:
            return self._queries.get(name)

    def snapshot(self) -> dict[str, QueryProgress]:
        with self._lock:
            return dict(self._queries)

    def series(self, name: str) -> list[BatchMetrics]:
        """A copy of the query's per-batch metrics, oldest first."""
        with self._lock:
            q = self._queries.get(name)
            return list(q.metrics) if q else []
