"""Reading a query's progress reports: only those of batches that ran.

Spark also reports triggers that found nothing to do (every ``noDataProgressEventInterval``):
such a report carries the id of the batch *not yet run* and the state metrics of the last one, so
counting it would attribute a future batch id and count dropped rows twice.

>>> ran([{"batchId": 2, "durationMs": {"triggerExecution": 1}}, {"batchId": 2, "durationMs": {"addBatch": 5}}])
[{'batchId': 2, 'durationMs': {'addBatch': 5}}]
"""

from __future__ import annotations

from collections.abc import Iterable


def ran(progress: Iterable[dict]) -> list[dict]:
    """The reports of batches that ran (their sink was given the batch: ``durationMs`` has ``addBatch``)."""
    return [p for p in progress if "addBatch" in (p.get("durationMs") or {})]


def dropped_by_watermark(progress: Iterable[dict]) -> int:
    """Rows Spark dropped as late in these batches, over all stateful operators."""
    return sum(op.get("numRowsDroppedByWatermark", 0) for p in ran(progress) for op in p.get("stateOperators") or [])
