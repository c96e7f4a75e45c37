"""``check_source_replay``: a source reads the same rows for the same offsets, each row with its own offset.

Spark keeps a micro-batch's offsets in the checkpoint before it runs the batch; after a crash it
runs that batch again from those offsets, and exactly-once sinks rely on it reading the same rows.
The check does what a crash does: a query records every batch up to ``replay_batch`` and fails
inside that batch (so it is planned, never committed); a second query on the same checkpoint,
with the source opened anew, replays it. The replay must give the same rows (``value``, ``key``,
``offset``, ``ingest_time``), and every row read must have an offset of its own: sinks key dead
letters on it. A source that declares ``fault_tolerant = False`` promises no replay: the check
says so and checks its offsets only.

>>> check_source_replay(spark, "files:///data/landing?max_files_per_trigger=1")  # doctest: +SKIP
SourceReport(source='files:/data/landing (JSON lines)', batches=2, rows=40, replayed_batch=1, replayed_rows=20, notes=())
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from speedlayer.core.errors import ConfigError, QueryFailedError
from speedlayer.core.schemas import EventSchema
from speedlayer.runtime.stopping import first_line
from speedlayer.sources import open_source
from speedlayer.sources.base import Source
from speedlayer.testing.errors import NothingCompared, OffsetProblem, ReplayMismatch

COLUMNS = ("value", "key", "offset", "ingest_time")


@dataclass(frozen=True)
class SourceReport:
    """What the check read: batches 0 .. ``replayed_batch`` the first time, and the replayed one again."""

    source: str
    batches: int
    rows: int
    replayed_batch: int | None
    replayed_rows: int
    notes: tuple[str, ...] = ()


class _StopHere(RuntimeError):
    """Raised inside the batch to replay: the query fails before Spark commits it, as in a crash."""


class _Recorder:
    """The ``foreachBatch`` function: keeps each batch's rows, and fails batch ``stop_at``."""

    def __init__(self, columns: Sequence[str], stop_at: int | None):
        self.columns, self.stop_at = list(columns), stop_at
        self.rows: dict[int, list[tuple]] = {}
        self.stopped = False

    def __call__(self, batch, batch_id: int) -> None:
        self.rows[batch_id] = [tuple(r) for r in batch.select(*self.columns).collect()]
        if self.stop_at is not None and batch_id >= self.stop_at:
            self.stopped = True
            raise _StopHere(f"the replay check stops the query inside batch {batch_id}")


def check_source_replay(spark: SparkSession, source: str | Source, *, replay_batch: int = 1,
                        max_events: int | None = None, schema: EventSchema | None = None,
                        columns: Sequence[str] = COLUMNS) -> SourceReport:
    """Read ``source`` (a URI, or a Source object, which is then reused for the replay) up to micro-batch
    ``replay_batch``, crash there, replay it; raise ``ReplayMismatch`` or ``OffsetProblem`` on a broken promise.

    The source must hold enough data for ``replay_batch + 1`` micro-batches (cap them with
    ``max_files_per_trigger=1``, ``max_records_per_trigger=N`` or ``rows_per_batch=N``); the
    replayed batch must hold rows. ``schema``, the events the source serves, names the columns of
    csv/parquet landing files (e.g. ``speedlayer.VEHICLE_EVENT``).

    >>> check_source_replay(spark, "generator://?seed=3&rows_per_batch=500", max_events=2000).replayed_rows  # doctest: +SKIP
    500
    """
    first_source = _opened(source, schema)
    run_state: dict[str, Any] = {}
    first_source.check()
    first_source.pin(run_state)
    first_source.check_session(spark)
    with tempfile.TemporaryDirectory(prefix="speedlayer-replay-") as tmp:
        checkpoint = Path(tmp) / "checkpoint"
        first = _read(spark, first_source, checkpoint, replay_batch, columns, max_events)
        _check_offsets(first_source, first, list(columns))
        read = sum(len(rows) for rows in first.values())
        if not first_source.fault_tolerant:
            note = (f"{first_source.scheme}:// declares itself not fault-tolerant (a restart does not read the same "
                    "rows again), so the replay was not checked; its offsets were")
            return SourceReport(first_source.describe(), len(first), read, None, 0, (note,))
        if not first[replay_batch]:
            raise NothingCompared(f"{first_source.describe()}: batch {replay_batch} read no rows, so replaying it proves "
                                  "nothing: give the source more data, or fewer rows per batch")
        again_source = first_source if isinstance(source, Source) else _opened(source, schema)
        again_source.pin(run_state)
        again = _read(spark, again_source, checkpoint, replay_batch, columns, max_events)
    _check_same(first_source.describe(), replay_batch, first[replay_batch], again.get(replay_batch), sorted(again))
    return SourceReport(first_source.describe(), len(first), read, replay_batch, len(again[replay_batch]))


def _opened(source: str | Source, schema: EventSchema | None) -> Source:
    if isinstance(source, Source):
        return source
    opened = open_source(source)
    opened.event_schema = schema
    return opened


def _read(spark: SparkSession, source: Source, checkpoint: Path, stop_at: int, columns: Sequence[str],
          max_events: int | None) -> dict[int, list[tuple]]:
    """Every batch's rows, up to and including ``stop_at``, where the query is made to fail."""
    raw = source.read_stream(spark, max_events)
    missing = [c for c in columns if c not in raw.columns]
    if missing:
        raise ConfigError(f"{source.describe()} gives no column {missing[0]!r}: a source yields {', '.join(COLUMNS)}")
    recorder = _Recorder(columns, stop_at if source.fault_tolerant else None)
    query = (raw.writeStream.foreachBatch(recorder).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="0 seconds").start())
    try:
        query.processAllAvailable()
    except Exception as exc:  # noqa: BLE001 — ours, or the source failing
        if not recorder.stopped:
            raise QueryFailedError(f"{source.describe()} failed while read: {first_line(exc)}") from None
    finally:
        query.stop()
    if source.fault_tolerant and not recorder.stopped:
        raise NothingCompared(f"{source.describe()} ran dry after {len(recorder.rows)} micro-batch(es), before batch "
                              f"{stop_at} to replay: give it more data or fewer rows per batch (files: "
                              "max_files_per_trigger=1, redis: max_records_per_trigger=N, generator: rows_per_batch=N)")
    return recorder.rows


def _check_offsets(source: Source, batches: dict[int, list[tuple]], columns: list[str]) -> None:
    if "offset" not in columns:
        return
    at = columns.index("offset")
    offsets = [(row[at], batch) for batch, rows in sorted(batches.items()) for row in rows]
    nulls = [batch for offset, batch in offsets if offset is None]
    if nulls:
        raise OffsetProblem(f"{source.describe()} gave {len(nulls)} row(s) without an offset (first in batch {nulls[0]}): "
                            "give every row its position in the source (e.g. <partition>/<entry id>)")
    counts = Counter(offset for offset, _ in offsets)
    twice = [(o, n) for o, n in counts.items() if n > 1]
    if twice:
        shown = ", ".join(f"{o!r} x{n}" for o, n in sorted(twice)[:3])
        raise OffsetProblem(f"{source.describe()} gave {len(twice)} offset(s) to more than one row ({shown}): each row "
                            "needs its own offset (e.g. <file>:<line>, <partition>/<entry id>); sinks key dead letters "
                            "on it, so rows sharing one overwrite each other")


def _check_same(source: str, batch: int, first: list[tuple], again: list[tuple] | None, seen: list[int]) -> None:
    if again is None:
        raise ReplayMismatch(f"{source}: after a crash inside batch {batch}, the restarted query ran batches {seen} but "
                             f"not batch {batch} again: the source must resume from the offsets in the checkpoint")
    only_first, only_again = Counter(first) - Counter(again), Counter(again) - Counter(first)
    if only_first or only_again:
        raise ReplayMismatch(
            f"{source}: batch {batch} read again from the checkpoint (as after a crash) gave other rows than its first "
            f"read: {sum(only_first.values())} row(s) only in the first read, {sum(only_again.values())} only in the "
            f"replay; first read: {_some(only_first)}; replay: {_some(only_again)}. A source must read exactly the same "
            "entries for the same offsets: fix each batch's range on the driver (in its offsets) and derive every "
            "column from the entry, not from the clock or a random draw")


def _some(rows: Counter) -> str:
    return "; ".join(repr(row)[:160] for row in list(rows)[:2]) or "none"
