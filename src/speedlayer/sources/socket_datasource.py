"""The Spark side of ``socket://``: a Python Data Source whose driver holds a bounded line buffer.

Spark runs the stream reader's offset calls in one Python process per query on the driver; there
the first call connects and starts a thread (``socket_buffer.pump``) that fills a ``LineBuffer``.
An offset is ``{"lines": n}``: the number of the last line of the batch, counted by the run (a
restart continues the count from the checkpoint). ``partitions`` copies the planned lines into the
partitions themselves, so executors need no way back to the driver; the buffer forgets lines once
their batch is done (``latestOffset`` of the next batch, or ``commit``).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import StructType

from speedlayer.core.errors import SourceError
from speedlayer.core.schemas import RAW_SCHEMA
from speedlayer.sources.socket_buffer import LineBuffer, pump

FORMAT = "speedlayer_socket"
#: lines per input partition: a big batch is read by several tasks
LINES_PER_PARTITION = 20_000
#: how long the first offset call waits for the server to accept the connection
CONNECT_TIMEOUT_S = 10.0

log = logging.getLogger(__name__)


class LinesPartition(InputPartition):
    """Lines numbered ``first`` .. ``first + len(lines) - 1`` and their ingest times (µs), carried to the task."""

    def __init__(self, first: int, lines: list[bytes], ingest_us: list[int]):
        self.first, self.lines, self.ingest_us = first, lines, ingest_us

    def __repr__(self) -> str:
        return f"LinesPartition({self.first} .. {self.first + len(self.lines) - 1})"


def record_batch(part: LinesPartition):
    """The RAW Arrow record batch of one partition: value, key (null), offset (line number), ingest_time."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        values = pa.array(part.lines, pa.binary()).cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: replaced as Spark's socket source does, decode refuses it
        values = pa.array([line.decode("utf-8", "replace") for line in part.lines], pa.string())
    count = len(part.lines)
    return pa.RecordBatch.from_arrays(
        [
            values,
            pa.nulls(count, pa.string()),
            pa.array(range(part.first, part.first + count), pa.int64()).cast(pa.string()),
            pa.array(part.ingest_us, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        ],
        schema=to_arrow_schema(RAW_SCHEMA, timezone="UTC"),
    )


def _number(offset: dict | None) -> int:
    return int((offset or {}).get("lines", 0))


class _StreamReader(DataSourceStreamReader):
    """Driver: the connection, its buffer and offsets (started lazily: Spark also builds readers
    in planning processes that only pickle ``read``); executors: ``read``."""

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        self._buffer: LineBuffer | None = None
        self._conn: socket.socket | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_buffer": None, "_conn": None}

    @property
    def _where(self) -> str:
        return f"{self.spec['host']}:{self.spec['port']}"

    def _connected(self, numbered_after: int) -> LineBuffer:
        """The buffer, connecting on the first call; lines are numbered after ``numbered_after``."""
        if self._buffer is not None:
            return self._buffer
        try:
            conn = socket.create_connection((self.spec["host"], self.spec["port"]), timeout=CONNECT_TIMEOUT_S)
        except OSError as exc:
            raise SourceError(f"socket://{self._where}: cannot connect ({exc.strerror or exc}): start the line server "
                              "first, or fix the address") from None
        conn.settimeout(None)
        self._conn = conn
        self._buffer = LineBuffer(int(self.spec["max_buffered_lines"]), int(self.spec["max_buffered_bytes"]),
                                  numbered_after)
        threading.Thread(target=pump, args=(conn, self._buffer, int(self.spec["max_line_bytes"]), self._where),
                         name=f"socket-source-{self._where}", daemon=True).start()
        return self._buffer

    def initialOffset(self) -> dict:
        return {"lines": 0}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        buffer = self._connected(_number(start))
        buffer.free_through(_number(start))  # the batch that ended there is done: room for more lines
        return {"lines": max(buffer.received, _number(start))}

    def reportLatestOffset(self) -> dict | None:
        return {"lines": self._buffer.received} if self._buffer is not None else None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        after, upto = _number(start), _number(end)
        buffer = self._connected(upto)
        lines = buffer.take(after, upto)
        if len(lines) < upto - after:  # planned before a restart: those lines were only in the old driver
            log.warning("socket://%s: lines %d .. %d were received before a restart and are lost",
                        self._where, after + 1, upto - len(lines))
        first = upto - len(lines) + 1
        return [LinesPartition(first + i, [line for line, _ in chunk], [t for _, t in chunk])
                for i in range(0, len(lines), LINES_PER_PARTITION)
                for chunk in [lines[i:i + LINES_PER_PARTITION]]]

    def read(self, partition: LinesPartition) -> Iterator:  # type: ignore[override]
        if partition.lines:
            yield record_batch(partition)

    def commit(self, end: dict) -> None:
        if self._buffer is not None:
            self._buffer.free_through(_number(end))

    def stop(self) -> None:
        if self._buffer is not None:
            self._buffer.close()
        if self._conn is not None:
            try:
                self._conn.shutdown(socket.SHUT_RDWR)  # wakes the pump blocked in recv
            except OSError:
                pass


class SocketDataSource(DataSource):
    """Spark's view of the source; option ``spec`` (JSON: host, port and the buffer bounds)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return RAW_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _StreamReader(json.loads(self.options["spec"]))
