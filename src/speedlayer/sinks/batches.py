"""Writing a micro-batch to a server from the executors: one connection per partition, Arrow in, retries.

A sink that writes to a database or Redis describes *how* in a ``Connector`` (a small picklable
object holding only settings: it connects, writes one Arrow record batch, and says which errors
are worth retrying). ``BatchFunction`` is the ``foreachBatch`` function the query runs on the
driver; it ships a ``PartitionJob`` to the executors with ``mapInArrow``, so rows travel as Arrow
record batches and never become Python objects on the driver.

Retries: a transient failure (connection refused or lost, server restarting) closes the
connection, waits 0.5 s doubling up to 10 s, reconnects and rewrites the same record batch, for up
to ``retry_for`` per record batch. Writes are idempotent by key, so rewriting a record batch that
was partly applied is safe, and so is Spark replaying the whole batch after a restart.
"""

from __future__ import annotations

import importlib
import re
import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar

import pyarrow as pa
from pydantic import BaseModel, Field, field_validator

from speedlayer.durations import parse_duration
from speedlayer.errors import ConfigError, SinkError
from speedlayer.faults import reached

log = logging.getLogger("speedlayer.sinks")
T = TypeVar("T")

#: first pause after a transient failure, and the longest one (seconds)
FIRST_PAUSE_S, MAX_PAUSE_S = 0.5, 10.0
_ERROR_LINE = re.compile(r"speedlayer\.errors\.\w+: ([^\n]+)")


def require(module: str, extra: str, what: str) -> Any:
    """Import a connector's client library or say which extra installs it.

    >>> require("json", "none", "JSON").dumps([])
    '[]'
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"the {what} sink needs the {module} package: pip install 'speedlayer[{extra}]'") from None


def one_line(error: BaseException, secret: str | None = None) -> str:
    """An error as one line, with ``secret`` (a password) blanked out wherever it shows up.

    >>> one_line(ValueError("bad\\n  value for pw hunter2"), "hunter2")
    'bad value for pw ***'
    """
    text = " ".join(str(error).split()) or type(error).__name__
    return text.replace(secret, "***") if secret else text


def pauses(first: float = FIRST_PAUSE_S, cap: float = MAX_PAUSE_S) -> Iterator[float]:
    """The pauses between attempts: exponential, capped.

    >>> import itertools; list(itertools.islice(pauses(), 7))
    [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    """
    pause = first
    while True:
        yield pause
        pause = min(pause * 2, cap)


def retrying(action: Callable[[], T], *, transient: Callable[[BaseException], bool], retry_for_s: float,
             what: str, secret: str | None = None, on_failure: Callable[[], None] = lambda: None,
             sleep: Callable[[float], None] = time.sleep) -> T:
    """Run ``action``; on a transient error call ``on_failure``, pause and try again for up to ``retry_for_s``.

    A permanent error, or a transient one that outlasts ``retry_for_s``, becomes a one-line
    SinkError that names ``what`` (never the password).

    >>> retrying(lambda: 42, transient=lambda e: True, retry_for_s=1, what="x")
    42
    """
    started = time.monotonic()
    waits = pauses()
    while True:
        try:
            return action()
        except SinkError:
            raise
        except Exception as exc:  # noqa: BLE001 — classified right here
            reason = one_line(exc, secret)
            if not transient(exc):
                raise SinkError(f"{what} refused the write: {reason}") from None
            on_failure()
            elapsed = time.monotonic() - started
            if elapsed >= retry_for_s:
                raise SinkError(f"lost {what} for {elapsed:.0f}s (retry_for={retry_for_s:g}s): {reason}; "
                                "start the server, then restart the run (the batch is replayed from the checkpoint)") from None
            pause = min(next(waits), max(retry_for_s - elapsed, 0.05))
            log.warning("speedlayer: %s failed (%s); retrying in %.1fs", what, reason, pause)
            sleep(pause)


class RetryOptions(BaseModel):
    """The option every sink that writes to a server takes."""

    retry_for: str = Field("120s", description="how long a batch retries a lost server before the query fails")

    @field_validator("retry_for")
    @classmethod
    def _duration(cls, value: str) -> str:
        parse_duration(value, "retry_for")
        return value


class Connector(ABC):
    """How to write Arrow record batches to one server. Pickled to the executors: settings only.

    ``write`` must be idempotent: the same record batch may be written again after a failure.
    """

    #: where it writes, for messages, e.g. "PostgreSQL at db:5432/fleet" (never a password)
    what: str
    retry_for_s: float = 120.0
    secret: str | None = None

    @abstractmethod
    def connect(self) -> Any:
        """A new connection."""

    @abstractmethod
    def write(self, conn: Any, batch: pa.RecordBatch, batch_id: int, first_index: int) -> None:
        """Write one record batch; ``first_index`` is the position of its first row in the partition."""

    @abstractmethod
    def transient(self, error: BaseException) -> bool:
        """Whether ``error`` may go away on its own (worth a reconnect and another try)."""

    def close(self, conn: Any) -> None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 — closing a broken connection may fail too
            pass


@dataclass
class PartitionJob:
    """The ``mapInArrow`` function: writes a partition's record batches, yields how many rows it wrote."""

    connector: Connector
    batch_id: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        connector, conn, written = self.connector, None, 0

        def drop() -> None:
            nonlocal conn
            if conn is not None:
                connector.close(conn)
            conn = None

        def attempt(batch: pa.RecordBatch) -> None:
            nonlocal conn
            if conn is None:
                conn = connector.connect()
            connector.write(conn, batch, self.batch_id, written)

        try:
            for batch in batches:
                if batch.num_rows:  # an empty partition opens no connection
                    retrying(lambda: attempt(batch), transient=connector.transient, retry_for_s=connector.retry_for_s,
                             what=connector.what, secret=connector.secret, on_failure=drop)
                    if not written:
                        reached("mid-write", self.batch_id, connector.what)
                    written += batch.num_rows
            reached("partition-written", self.batch_id, connector.what)
        finally:
            drop()
        yield pa.RecordBatch.from_pydict({"rows": pa.array([written], pa.int64())})


class BatchFunction:
    """The ``foreachBatch`` function: write every partition of the batch from the executors.

    ``prepare(batch_df)`` may reshape the batch first (e.g. one ordered partition). An error from
    an executor comes back as the one-line SinkError it raised, not as a worker traceback.

    >>> query = df.writeStream.foreachBatch(BatchFunction(connector)).start()  # doctest: +SKIP
    """

    def __init__(self, connector: Connector, prepare: Callable[[Any], Any] = lambda df: df):
        self.connector = connector
        self.prepare = prepare
        #: rows written by the last batch (for logs and tests)
        self.last_rows = 0

    def __call__(self, batch_df, batch_id: int) -> None:
        reached("planned", batch_id, self.connector.what)
        try:
            counts = self.prepare(batch_df).mapInArrow(PartitionJob(self.connector, batch_id), "rows long").collect()
        except Exception as exc:  # noqa: BLE001 — turned into one line when it is ours
            if interrupted(exc):
                raise RuntimeError(INTERRUPTED) from None
            message = sink_error_message(exc)
            if message is None:
                raise
            raise SinkError(message) from None
        self.last_rows = sum(row["rows"] for row in counts)
        reached("written", batch_id, self.connector.what)


#: How Spark recognises a foreachBatch function interrupted by ``query.stop()`` (its regex
#: ``PROXY_ERROR`` in StreamExecution). Re-raised short on purpose: matched against Spark's full
#: error text, several kB long, that regex overflows the JVM stack and kills the query thread.
INTERRUPTED = "py4j.protocol.Py4JJavaError: An error occurred while calling collectToPython.\n: java.lang.InterruptedException"
_INTERRUPTIONS = ("java.lang.InterruptedException", "java.io.InterruptedIOException",
                  "java.nio.channels.ClosedByInterruptException")


def interrupted(error: BaseException) -> bool:
    """Whether a Spark job failed because its query is being stopped."""
    from py4j.protocol import Py4JJavaError

    text = str(error) if isinstance(error, Py4JJavaError) else ""
    return any(f": {name}" in text for name in _INTERRUPTIONS)


def sink_error_message(error: BaseException) -> str | None:
    """The message of a speedlayer error raised in a Python worker (a sink's writer, a source's
    reader), found in Spark's wrapped error text: the last one, which is the cause.

    >>> sink_error_message(RuntimeError("Traceback ...\\nspeedlayer.errors.SinkError: lost X for 3s\\n at ..."))
    'lost X for 3s'
    >>> sink_error_message(RuntimeError("... speedlayer.errors.SourceError: entries were deleted\\n ..."))
    'entries were deleted'
    """
    found = _ERROR_LINE.findall(str(error))
    return found[-1].strip() if found else None
