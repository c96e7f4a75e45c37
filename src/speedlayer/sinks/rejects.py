"""Rows a database refuses: found on the executors, kept as the run's dead letters on the driver.

One row a database will not take (a key longer than its column, a NUL in PostgreSQL text, a
timestamp outside MySQL's range) must not stop the run. On the executors, ``write_isolating``
writes a record batch and, when the database refuses its data, splits it in halves until each
refused row stands alone: every other row is written, each refused row comes back with the
database's one-line reason. Halving costs about two failed statements per level, so one bad row
in 10,000 costs some 28 rolled-back statements, once. On the driver, ``RejectStore`` keeps them
as dead letters (``DEAD_LETTER_SCHEMA``) in one Parquet file per batch under
``<state-dir>/rejected/<output>/``: a replayed batch rewrites its own file, and a row refused
again unchanged in a later batch (complete mode re-emits every row) is not stored twice.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger("speedlayer.sinks")

#: what ``mapInArrow`` yields per partition: one row with the count written, one per refused row
PARTITION_RESULT = "rows long, payload string, reason string, offset string"
#: the dead-letter shape (speedlayer.core.schemas.DEAD_LETTER_SCHEMA) as Arrow, for files the driver writes
DEAD_LETTERS = pa.schema([("payload", pa.string()), ("reason", pa.string()),
                          ("ingest_time", pa.timestamp("us", "UTC")), ("key", pa.string()), ("offset", pa.string())])
_AT_ROW = re.compile(r" at row \d+")


def write_isolating(write: Callable[[pa.RecordBatch, int], None], batch: pa.RecordBatch,
                    refusal: Callable[[BaseException], str | None], start: int = 0) -> list[tuple[int, str]]:
    """Write ``batch`` with ``write(part, first_row)``; return ``(row, reason)`` for each row the database refused.

    An error ``refusal`` gives no reason for (lost connection, wrong table) is raised unchanged.

    >>> def write(part, first):
    ...     if "bad" in part.column(0).to_pylist(): raise ValueError("too long")
    >>> write_isolating(write, pa.record_batch({"w": ["a", "bad", "c"]}), lambda e: str(e))
    [(1, 'too long')]
    """
    try:
        write(batch, start)
        return []
    except Exception as exc:
        reason = refusal(exc)
        if reason is None:
            raise
    if batch.num_rows == 1:
        return [(start, _AT_ROW.sub("", reason))]
    half = batch.num_rows // 2
    return (write_isolating(write, batch.slice(0, half), refusal, start)
            + write_isolating(write, batch.slice(half), refusal, start + half))


def without(batch: pa.RecordBatch, refused: list[tuple[int, str]]) -> tuple[pa.RecordBatch, list[int]]:
    """The batch without the refused rows, and the original position of each row kept.

    >>> without(pa.record_batch({"w": ["a", "b", "c"]}), [(1, "no")])[1]
    [0, 2]
    """
    gone = {row for row, _ in refused}
    kept = [i for i in range(batch.num_rows) if i not in gone]
    return batch.take(pa.array(kept, pa.int64())), kept


def row_json(batch: pa.RecordBatch, row: int) -> str:
    """One row as JSON (times in ISO 8601), the payload of its dead letter.

    >>> row_json(pa.record_batch({"word": ["fox"], "count": [2]}), 0)
    '{"word": "fox", "count": 2}'
    """
    values = batch.slice(row, 1).to_pylist()[0]
    return json.dumps(values, default=lambda v: v.isoformat() if hasattr(v, "isoformat") else str(v), ensure_ascii=False)


def row_offset(output: str, batch: pa.RecordBatch, row: int, key: tuple[str, ...]) -> str:
    """A refused row's id, the same on every replay: ``<output>/<key values joined by '/'>``.

    >>> row_offset("totals", pa.record_batch({"word": ["fox"], "count": [2]}), 0, ("word",))
    'totals/fox'
    """
    values = batch.slice(row, 1).select(list(key)).to_pylist()[0] if key else {"row": row}
    text = [v.isoformat() if hasattr(v, "isoformat") else str(v) for v in values.values()]
    return "/".join([output, *text])


def partition_result(written: int, refused: list[tuple[str, str, str]]) -> pa.RecordBatch:
    """The record batch a partition hands back: its count, then its refused rows (payload, reason, offset)."""
    payloads, reasons, offsets = (list(column) for column in zip(*refused)) if refused else ([], [], [])
    return pa.RecordBatch.from_pydict({
        "rows": pa.array([written] + [0] * len(refused), pa.int64()),
        "payload": pa.array([None, *payloads], pa.string()),
        "reason": pa.array([None, *reasons], pa.string()),
        "offset": pa.array([None, *offsets], pa.string()),
    })


def nul_rows(batch: pa.RecordBatch) -> Iterator[tuple[int, str]]:
    """Rows with a NUL character in a text column (PostgreSQL text cannot hold one), found in Arrow.

    >>> list(nul_rows(pa.record_batch({"s": ["a", "b" + chr(0)], "n": [1, 2]})))
    [(1, "column 's' holds a NUL (\\\\x00) character, which PostgreSQL text cannot store")]
    """
    found: dict[int, str] = {}
    for name, array in zip(batch.schema.names, batch.columns):
        if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
            hits = pc.fill_null(pc.match_substring(array, "\x00"), False)
            for row in pc.indices_nonzero(hits).to_pylist():
                found.setdefault(row, f"column {name!r} holds a NUL (\\x00) character, which PostgreSQL text cannot store")
    return iter(sorted(found.items()))


class RejectStore:
    """The refused rows of one output, as dead-letter Parquet files in ``folder``, one per batch.

    >>> store = RejectStore(Path("st/rejected/totals"), "totals")  # doctest: +SKIP
    >>> store.save(3, [("{...}", "MariaDB refused: ...", "totals/x")])  # doctest: +SKIP
    """

    def __init__(self, folder: Path, output: str):
        self.folder, self.output = Path(folder), output
        self._stored: dict[tuple[str, str], int] | None = None  # (offset, payload) -> the batch that stored it

    def _file(self, batch_id: int) -> Path:
        return self.folder / f"batch-{batch_id:010d}.parquet"

    def _load(self) -> dict[tuple[str, str], int]:
        import pyarrow.parquet as pq

        stored: dict[tuple[str, str], int] = {}
        for path in sorted(self.folder.glob("batch-*.parquet")) if self.folder.is_dir() else []:
            batch_id = int(path.stem.removeprefix("batch-"))
            for row in pq.read_table(path, columns=["offset", "payload"]).to_pylist():
                stored.setdefault((row["offset"], row["payload"]), batch_id)
        return stored

    def save(self, batch_id: int, refused: list[tuple[str, str, str]]) -> int:
        """Keep a batch's refused rows (payload, reason, offset); returns how many were new."""
        import pyarrow.parquet as pq

        if self._stored is None:
            self._stored = self._load()
        stored = self._stored
        new = [r for r in refused if stored.get((r[2], r[0]), batch_id) >= batch_id]
        path = self._file(batch_id)
        if not new:
            path.unlink(missing_ok=True)
            return 0
        now = dt.datetime.now(dt.timezone.utc)
        table = pa.table({"payload": [r[0] for r in new], "reason": [r[1] for r in new], "ingest_time": [now] * len(new),
                          "key": [self.output] * len(new), "offset": [r[2] for r in new]}, schema=DEAD_LETTERS)
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f".{path.name}.tmp"  # a dot file: readers skip it until the rename
        pq.write_table(table, partial)
        os.replace(partial, path)
        for r in new:
            stored.setdefault((r[2], r[0]), batch_id)
        return len(new)
