"""A StreamingQueryListener that keeps the latest progress of every query, for views and stop rules."""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener


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
    #: Spark has reported the query's end (every progress report of it has arrived before)
    terminated: bool = False


class ProgressTracker(StreamingQueryListener):
    """Collects ``onQueryProgress`` events per query name (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._queries: dict[str, QueryProgress] = {}
        self._names: dict[str, str] = {}  # query id -> name (the termination event carries no name)

    def onQueryStarted(self, event: Any) -> None:
        name = event.name or str(event.id)
        with self._lock:
            self._names[str(event.id)] = name
            self._queries[name] = QueryProgress(name)

    def onQueryProgress(self, event: Any) -> None:
        self.record(json.loads(event.progress.json))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        with self._lock:
            query = self._queries.get(self._names.get(str(event.id), str(event.id)))
            if query is not None:
                query.terminated = True
            self._lock.notify_all()

    def wait_terminated(self, names: list[str], timeout: float = 5.0) -> bool:
        """Wait until Spark has delivered the end (and so every progress report) of these stopped queries."""
        with self._lock:
            return self._lock.wait_for(
                lambda: all(q is None or q.terminated for q in map(self._queries.get, names)), timeout)

    def record(self, progress: dict[str, Any]) -> None:
        """Take in one progress report (the JSON form of ``StreamingQueryProgress``)."""
        name = progress.get("name") or progress.get("id")
        with self._lock:
            q = self._queries.setdefault(name, QueryProgress(name))
            q.batches += 1
            q.last_batch_id = max(q.last_batch_id, int(progress.get("batchId", -1)))
            q.input_rows += int(progress.get("numInputRows", 0))
            q.input_rate = float(progress.get("inputRowsPerSecond") or 0.0)
            q.processing_rate = float(progress.get("processedRowsPerSecond") or 0.0)
            q.batch_ms = int((progress.get("durationMs") or {}).get("triggerExecution", 0))
            q.watermark = (progress.get("eventTime") or {}).get("watermark", q.watermark)
            q.sources = progress.get("sources") or []
            q.history.append(progress)

    def get(self, name: str) -> QueryProgress | None:
        with self._lock:
            return self._queries.get(name)

    def snapshot(self) -> dict[str, QueryProgress]:
        with self._lock:
            return dict(self._queries)
