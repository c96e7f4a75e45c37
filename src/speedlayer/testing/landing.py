"""Landing directories the helpers feed streams from: events as JSON-lines files, rows as parquet files.

Each file is written under a hidden name and renamed into place (a running query never reads half
a file), with a modification time one second after the previous one: Spark's file source takes
files in that order, and ``files://`` reports it as each event's ``ingest_time``.

>>> split_batches([{"a": 1}, {"a": 2}])
[[{'a': 1}, {'a': 2}]]
>>> split_batches([[{"a": 1}], ['{"a": 2}']])
[[{'a': 1}], ['{"a": 2}']]
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from speedlayer.core.errors import ConfigError


def split_batches(events: Sequence[Any]) -> list[list[Any]]:
    """``events`` as micro-batches: a list of lists is one batch per list, a flat list one batch."""
    if not isinstance(events, Sequence) or isinstance(events, (str, bytes)):
        raise ConfigError("events must be a list of events (dicts or JSON strings), or a list of such lists (one per "
                          f"micro-batch), not {type(events).__name__}")
    nested = [isinstance(e, (list, tuple)) for e in events]
    if any(nested) and not all(nested):
        raise ConfigError("events mixes single events and lists of events: give a flat list (one micro-batch) or a "
                          "list of lists (one micro-batch each)")
    return [list(batch) for batch in events] if events and all(nested) else [list(events)]


def payload_line(event: Any) -> str:
    """One event as the line a landing file holds: a dict as JSON, a string as it is.

    >>> payload_line({"event_id": "a"}), payload_line("not json")
    ('{"event_id": "a"}', 'not json')
    """
    if isinstance(event, dict):
        return json.dumps(event, default=str)
    if isinstance(event, str):
        if "\n" in event or "\r" in event:
            raise ConfigError(f"event {event[:40]!r} spans several lines: a landing file holds one event per line")
        return event
    raise ConfigError(f"an event must be a dict or a JSON string, not {type(event).__name__}: {event!r:.60}")


def first_mtime(ingest_time: datetime | None) -> float:
    """The modification time of the first file: ``ingest_time``, or now (whole seconds)."""
    return ingest_time.timestamp() if ingest_time is not None else float(int(time.time()))


def place(path: Path, write, mtime: float) -> Path:
    """Write ``path`` with ``write(hidden_path)`` under a hidden name, date it ``mtime``, rename it into place."""
    hidden = path.with_name(f".{path.name}.tmp")
    write(hidden)
    os.utime(hidden, (mtime, mtime))
    hidden.rename(path)
    return path


def land_events(landing: Path, events: Sequence[Any], number: int, mtime: float) -> Path:
    """Write ``events`` as the JSON-lines file ``batch-<number>.jsonl`` of ``landing``, modified at ``mtime``."""
    landing.mkdir(parents=True, exist_ok=True)
    text = "".join(payload_line(e) + "\n" for e in events)
    return place(landing / f"batch-{number:05d}.jsonl", lambda p: p.write_text(text), mtime)


def land_frames(landing: Path, frames: Sequence[Any], mtime: float) -> list[Path]:
    """Write each DataFrame of ``frames`` as one parquet file (``batch-<i>.parquet``), one second apart."""
    import pyarrow.parquet as pq

    landing.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, frame in enumerate(frames):
        table = frame.toArrow()
        paths.append(place(landing / f"batch-{i:05d}.parquet", lambda p, t=table: pq.write_table(t, p), mtime + i))
    return paths
