"""Prometheus metrics of a run, labelled by job (``speedlayer_job``) and query, read from the progress
tracker at scrape time.

The label is ``speedlayer_job``, not ``job``: Prometheus sets ``job`` to the scrape job's name and
would rename ours ``exported_job``. The tracker is filled by Spark's listener after each batch; a
scrape only reads what it holds, except the executors (labelled by job only), which a scrape reads from Spark's status store at
most once a second (``ExecutorWatch``). Counters are totals since the run started; gauges are the
last batch's, or now's for the executors.

>>> registry = metrics_registry(run)          # doctest: +SKIP
>>> text = generate_latest(registry)          # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from speedlayer.runtime.executors import ExecutorWatch
from speedlayer.runtime.processes import run_memory
from speedlayer.runtime.progress import DURATION_BUCKETS, ProgressTracker
from speedlayer.sources.base import partition_lag

PREFIX = "speedlayer"
#: the label naming the speedlayer job (Prometheus keeps ``job`` for the scrape job)
JOB_LABEL = "speedlayer_job"


class RunCollector(Collector):
    """Yields the metric families of every query the tracker knows, and of the run's executors."""

    def __init__(self, job: str, tracker: ProgressTracker, executors: ExecutorWatch | None = None):
        self.job, self.tracker, self.executors = job, tracker, executors

    def collect(self) -> Iterator[Metric]:
        f = _query_families()
        for name, q in sorted(self.tracker.snapshot().items()):
            labels = [self.job, name]
            _add_totals(f, labels, q)
            if q.latest is not None:
                _add_latest(f, labels, q)
        yield from f.values()
        yield from self._executors()
        yield from self._memory()

    def _memory(self) -> Iterator[Metric]:
        """Resident memory of the run's processes (Linux), by process."""
        memory = run_memory()
        resident = GaugeMetricFamily(f"{PREFIX}_process_resident_bytes", "resident memory of the run's processes: "
                                     "the Python driver, the driver JVM, Spark's Python workers together",
                                     labels=[JOB_LABEL, "process"])
        for process, size in (("driver_python", memory.driver_python), ("driver_jvm", memory.driver_jvm),
                              ("python_workers", memory.python_workers)):
            if size is not None:
                resident.add_metric([self.job, process], size)
        yield resident

    def _executors(self) -> Iterator[Metric]:
        """Executors running tasks now (local mode: 1, the driver), their cores, and those lost so far."""
        report = self.executors.poll() if self.executors is not None else None
        if report is None or report.alive is None:
            return
        alive = GaugeMetricFamily(f"{PREFIX}_executors", "executors running tasks now (local mode: 1, the driver)",
                                  labels=[JOB_LABEL])
        alive.add_metric([self.job], report.alive)
        yield alive
        if report.cores is not None:
            cores = GaugeMetricFamily(f"{PREFIX}_executor_cores", "cores of the executors running tasks now",
                                      labels=[JOB_LABEL])
            cores.add_metric([self.job], report.cores)
            yield cores
        lost = CounterMetricFamily(f"{PREFIX}_executors_lost", "executors lost while the run went on", labels=[JOB_LABEL])
        lost.add_metric([self.job], report.lost_count)
        yield lost


def _query_families() -> dict[str, Metric]:
    """Every per-query metric family, empty, by short name (in the order they are exposed)."""
    q_labels = [JOB_LABEL, "query"]

    def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=q_labels + list(extra))

    def counter(name: str, doc: str) -> CounterMetricFamily:
        return CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=q_labels)

    return {
        "batches": counter("batches", "micro-batches completed"),
        "input_rows": counter("input_rows", "records read from the source (events and dead letters)"),
        "output_rows": counter("output_rows", "rows written to the sink, where Spark counts them (its Kafka, console "
                                              "and memory sinks); absent for the others"),
        "dropped_by_watermark": counter("rows_dropped_by_watermark", "rows dropped as late by stateful operators"),
        "duplicates_removed": counter("duplicates_removed", "rows removed by deduplication operators"),
        "dead_letters": counter("dead_letters", "rows refused by decode (observed by every event query)"),
        "late_events_kept": counter("late_events_kept",
                                    "rows written by the late output: events behind the watermark, kept"),
        "input_rate": gauge("input_rows_per_second", "input rate of the last batch"),
        "processing_rate": gauge("processed_rows_per_second", "processing rate of the last batch"),
        "phase": gauge("batch_phase_seconds", "time of each part of the last batch (Spark's durationMs)", ("phase",)),
        "delay": gauge("scheduling_delay_seconds", "how late the last trigger started against its schedule"),
        "latency": gauge("latency_seconds", "end-to-end latency of the newest batch's events up to its commit",
                         ("since", "percentile")),
        "watermark": gauge("watermark_timestamp_seconds", "event-time watermark (epoch seconds)"),
        "lag": gauge("watermark_lag_seconds", "newest event time seen minus the watermark"),
        "state_rows": gauge("state_rows", "rows held by a stateful operator", ("operator",)),
        "state_mem": gauge("state_memory_bytes", "memory used by a stateful operator's state store", ("operator",)),
        "source_lag": gauge("source_lag_entries", "entries waiting in the source beyond the last batch"),
        "partition_lag": gauge("source_partition_lag_entries",
                               "entries waiting beyond the last batch in each topic partition (Kafka)", ("topic", "partition")),
        "durations": HistogramMetricFamily(f"{PREFIX}_batch_duration_seconds", "duration of micro-batches",
                                           labels=q_labels),
    }


def _add_totals(f: dict[str, Metric], labels: list[str], q) -> None:
    """A query's counters since the run started, and its batch-duration histogram."""
    f["batches"].add_metric(labels, q.batches)
    f["input_rows"].add_metric(labels, q.input_rows)
    for total in ("output_rows", "dropped_by_watermark", "duplicates_removed", "dead_letters", "late_events_kept"):
        if total in q.totals:
            f[total].add_metric(labels, q.totals[total])
    cumulative, buckets = 0, []
    for bound, count in zip(DURATION_BUCKETS, q.duration_counts):
        cumulative += count
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
    f["durations"].add_metric(labels, buckets, q.duration_sum_s)


def _add_latest(f: dict[str, Metric], labels: list[str], q) -> None:
    """A query's gauges, from its newest batch."""
    m = q.latest
    f["input_rate"].add_metric(labels, m.input_rate)
    f["processing_rate"].add_metric(labels, m.processing_rate)
    for part, ms in sorted(m.phases_ms.items()):
        f["phase"].add_metric(labels + [part], ms / 1000)
    if m.scheduling_delay_ms is not None:
        f["delay"].add_metric(labels, m.scheduling_delay_ms / 1000)
    for since, values in q.latency_ms.items():
        for percentile, ms in values.items():  # "p50", "p95", "p99": Prometheus keeps "quantile" for summaries
            f["latency"].add_metric(labels + [since, percentile], ms / 1000)
    if m.watermark_ms is not None:
        f["watermark"].add_metric(labels, m.watermark_ms / 1000)
    if m.watermark_lag_ms is not None:
        f["lag"].add_metric(labels, m.watermark_lag_ms / 1000)
    for i, op in enumerate(m.state):
        f["state_rows"].add_metric(labels + [f"{i}:{op.name}"], op.rows)
        f["state_mem"].add_metric(labels + [f"{i}:{op.name}"], op.memory_bytes)
    if m.source_lag is not None:
        f["source_lag"].add_metric(labels, m.source_lag)
    for (topic, partition), behind in partition_lag(q.sources).items():
        f["partition_lag"].add_metric(labels + [topic, partition], behind)


def metrics_registry(job: str, tracker: ProgressTracker, executors: ExecutorWatch | None = None) -> CollectorRegistry:
    """A registry holding only this run's metrics (no process metrics of other libraries)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunCollector(job, tracker, executors))
    return registry
