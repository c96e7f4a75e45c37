"""Per-batch metrics of a streaming query, derived from Spark's progress report alone.

Spark reports after every micro-batch (``StreamingQueryProgress``): rows, rates, ``durationMs``
parts, watermark, state operators and the query's *observed metrics*. The runner has decode add
one observation to every micro-batch query (``observation``), computed by Spark inside the batch
itself: rows refused, events accepted, and the percentiles of event and ingest time of the events
the batch read. Latency is
then ``batch end - event time``, where *batch end* is the trigger start plus ``triggerExecution``,
a moment after the sink has committed the batch and Spark has written its commit log. So:

- latency p50 = batch end - the median event time of the batch;
- latency p95 / p99 = batch end - the 5th / 1st percentile of event time (older events waited longer).

It is the latency of the batch that took each event in, up to that batch's commit. A windowed
output in append mode writes a window later, when the watermark closes it: that extra wait is
the window length plus the watermark delay, and it is not part of this figure.

>>> m = batch_metrics({"name": "q", "batchId": 0, "numInputRows": 0, "timestamp": "2026-11-22T10:00:00.000Z",
...                    "durationMs": {"triggerExecution": 500}})
>>> (m.batch_id, m.batch_ms, m.latency_ms)
(0, 500, {})
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from speedlayer.decode.observation import LATE_OBSERVATION, OBSERVATION, QUANTILES


@dataclass
class StateOperator:
    """One stateful operator of a batch: its rows, memory and what it dropped."""

    name: str
    rows: int
    memory_bytes: int
    dropped_by_watermark: int
    duplicates_removed: int


@dataclass
class BatchMetrics:
    """What one batch of one query did; times in epoch milliseconds, durations in milliseconds."""

    query: str
    batch_id: int
    started_ms: int
    batch_ms: int
    input_rows: int
    input_rate: float
    processing_rate: float
    phases_ms: dict[str, int] = field(default_factory=dict)
    #: how late the trigger started against its schedule (None for the first batch)
    scheduling_delay_ms: int | None = None
    #: {"event": {"p50": ms, ...}, "ingest": {...}}; empty when the batch read no event
    latency_ms: dict[str, dict[str, int]] = field(default_factory=dict)
    watermark_ms: int | None = None
    max_event_ms: int | None = None
    #: newest event time read so far minus the watermark
    watermark_lag_ms: int | None = None
    events: int | None = None
    #: rows of the batch that decode refused, when observed
    dead_letters: int | None = None
    #: rows the ``late`` output wrote in the batch (events behind the watermark, kept), when observed
    late_events_kept: int | None = None
    output_rows: int | None = None
    state: list[StateOperator] = field(default_factory=list)
    source_lag: int | None = None

    @property
    def records_read(self) -> int:
        """Records the batch took from its source: decoded events plus dead letters where decode counted
        them (a files source's Spark rows are whole files), else Spark's ``numInputRows``."""
        return self.events + (self.dead_letters or 0) if self.events is not None else self.input_rows

    @property
    def ended_ms(self) -> int:
        return self.started_ms + self.batch_ms

    @property
    def dropped_by_watermark(self) -> int:
        return sum(op.dropped_by_watermark for op in self.state)

    @property
    def duplicates_removed(self) -> int:
        return sum(op.duplicates_removed for op in self.state)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(ended_ms=self.ended_ms, dropped_by_watermark=self.dropped_by_watermark,
                    duplicates_removed=self.duplicates_removed)
        return data


#: batches in a row in which the source's lag grew before a run says its input is ahead of processing
BEHIND_AFTER = 5


def falling_behind(metrics: Sequence[BatchMetrics], batches: int = BEHIND_AFTER) -> int | None:
    """The source's lag after the newest batch when it grew in each of the last ``batches`` batches (the
    input is ahead of processing and the gap widens: the machine is too slow for the rate), else None.

    >>> from types import SimpleNamespace as B
    >>> falling_behind([B(source_lag=n) for n in (10, 40, 90, 150, 230, 300)])
    300
    >>> falling_behind([B(source_lag=n) for n in (10, 40, 20, 150, 230, 300)]) is None
    True
    """
    lags = [m.source_lag for m in list(metrics)[-(batches + 1):]]
    if len(lags) <= batches or any(lag is None for lag in lags):
        return None
    return lags[-1] if all(b > a for a, b in zip(lags, lags[1:])) else None


def epoch_ms(text: str | None) -> int | None:
    """Spark's ISO-8601 timestamps (``2026-11-22T10:00:00.000Z``) as epoch milliseconds.

    >>> epoch_ms("1970-01-01T00:00:01.500Z"), epoch_ms("soon")
    (1500, None)
    """
    if not text:
        return None
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def _state(op: dict[str, Any]) -> StateOperator:
    custom = op.get("customMetrics") or {}
    return StateOperator(
        name=str(op.get("operatorName", "?")),
        rows=int(op.get("numRowsTotal") or 0),
        memory_bytes=int(op.get("memoryUsedBytes") or 0),
        dropped_by_watermark=int(op.get("numRowsDroppedByWatermark") or 0),
        duplicates_removed=int(custom.get("numDroppedDuplicateRows") or 0),
    )


def scheduled_start(previous: BatchMetrics, interval_ms: int) -> int:
    """When the batch after ``previous`` was due: the next multiple of the trigger interval after the
    previous start (Spark aligns processing-time triggers so), or at once after it for ``processing:0s``.

    >>> prev = BatchMetrics("q", 0, started_ms=10_100, batch_ms=300, input_rows=0, input_rate=0, processing_rate=0)
    >>> scheduled_start(prev, 5000), scheduled_start(prev, 0)
    (15000, 10400)
    """
    if interval_ms <= 0:
        return previous.ended_ms
    return (previous.started_ms // interval_ms + 1) * interval_ms


def batch_metrics(progress: dict[str, Any], previous: BatchMetrics | None = None, interval_ms: int = 0,
                  max_event_ms: int | None = None) -> BatchMetrics:
    """The metrics of one progress report (its JSON form); ``previous`` is the query's batch before it,
    ``max_event_ms`` the newest event time seen before this batch (for the watermark lag)."""
    durations = {k: int(v) for k, v in (progress.get("durationMs") or {}).items()}
    started = epoch_ms(progress.get("timestamp")) or 0
    m = BatchMetrics(
        query=progress.get("name") or str(progress.get("id")),
        batch_id=int(progress.get("batchId", -1)),
        started_ms=started,
        batch_ms=durations.get("triggerExecution", 0),
        input_rows=int(progress.get("numInputRows") or 0),
        input_rate=float(progress.get("inputRowsPerSecond") or 0.0),
        processing_rate=float(progress.get("processedRowsPerSecond") or 0.0),
        phases_ms={k: v for k, v in durations.items() if k != "triggerExecution"},
        state=[_state(op) for op in progress.get("stateOperators") or []],
    )
    if previous is not None and previous.batch_id < m.batch_id:
        m.scheduling_delay_ms = max(0, started - scheduled_start(previous, interval_ms))
    watermark = epoch_ms((progress.get("eventTime") or {}).get("watermark"))
    m.watermark_ms = watermark if watermark else None  # Spark reports 1970 until the first event
    sink = progress.get("sink") or {}
    if sink.get("numOutputRows") is not None and int(sink["numOutputRows"]) >= 0:
        m.output_rows = int(sink["numOutputRows"])

    observed = (progress.get("observedMetrics") or {}).get(OBSERVATION)
    newest = max_event_ms
    if observed:
        m.events = int(observed.get("events") or 0)
        refused = observed.get("dead_letters")  # absent: a job's own decoder that does not count them
        m.dead_letters = int(refused) if refused is not None else None
        if observed.get("max_event_ms") is not None:
            newest = max(newest or 0, int(observed["max_event_ms"]))
        for since in ("event", "ingest"):
            values = observed.get(f"{since}_ms")
            if m.events and values:
                m.latency_ms[since] = {name: max(0, m.ended_ms - int(v)) for name, v in zip(QUANTILES, values)}
    late = (progress.get("observedMetrics") or {}).get(LATE_OBSERVATION)
    if late:
        m.late_events_kept = int(late.get("rows") or 0)
    m.max_event_ms = newest
    if newest is not None and m.watermark_ms is not None:
        m.watermark_lag_ms = max(0, newest - m.watermark_ms)
    return m
