"""Writing a micro-batch to a server from the executors: one connection per partition, Arrow in, retries.

A sink that writes to a database or Redis describes *how* in a ``Connector`` (a small picklable
object holding only settings: it connects, writes one Arrow record batch, and says which errors
are worth retrying). ``BatchFunction`` is the ``foreachBatch`` function the query runs on the
driver; it ships a ``PartitionJob`` to the executors with ``mapInArrow``, so rows travel as Arrow
record batches and never become Python objects on the driver.

Refusals: an error that is the database refusing data (a value too long, out of range) is not
retried and does not fail the batch: ``write_isolating`` (rejects.py) writes every other row and
the refused ones come back to the driver with the reason, to be kept as the run's dead letters.

Retries: a transient failure (connection refused or lost, server restarting) closes the
connection, waits 0.5 s doubling up to 10 s, reconnects and rewrites the same record batch, for up
to ``retry_for`` per record batch. Writes are idempotent by key, so rewriting a record batch that
was partly applied is safe, and so is Spark replaying the whole batch after a restart.
"""

from __future__ import annotations

import importlib
import logging
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
from pydantic import BaseModel, Field, field_validator

from speedlayer.core.durations import parse_duration
from speedlayer.core.errors import ConfigError, SinkError
from speedlayer.core.faults import reached
from speedlayer.core.spark_errors import raise_if_interrupted
from speedlayer.sinks.rejects import (
    PARTITION_RESULT,
    RejectStore,
    partition_result,
    row_json,
    row_offset,
    without,
    write_isolating,
)

log = logging.getLogger("speedlayer.sinks")
T = TypeVar("T")

#: first pause after a transient failure, and the longest one (seconds)
FIRST_PAUSE_S, MAX_PAUSE_S = 0.5, 10.0
_ERROR_LINE = re.compile(r"speedlayer\.(?:core\.)?errors\.\w+: ([^\n]+)")


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
             server: str = "server",
             sleep: Callable[[float], None] = time.sleep,
             timed_out: Callable[[BaseException], str | None] = lambda exc: None) -> T:
    """Run ``action``; on a transient error call ``on_failure``, pause and try again for up to ``retry_for_s``.

    A permanent error, or a transient one that outlasts ``retry_for_s``, becomes a one-line
    SinkError that names ``what`` (never the password); ``timed_out(error)`` gives the advice when
    the last try ran into a timeout (a held lock, a stalled network) rather than a lost server.

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
            advice = timed_out(exc) if elapsed >= retry_for_s else None
            if advice:
                raise SinkError(f"{what} kept timing out for {elapsed:.0f}s (retry_for={retry_for_s:g}s): {reason}; "
                                f"{advice}") from None
            if elapsed >= retry_for_s:
                raise SinkError(f"lost {what} for {elapsed:.0f}s (retry_for={retry_for_s:g}s): {reason}; "
                                f"start the {server}, then restart the run (the batch is replayed from the checkpoint)") from None
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

    def refusal(self, conn: Any, error: BaseException) -> str | None:
        """The one-line reason when ``error`` is the server refusing the data itself (None: any other error)."""
        return None

    def screen(self, conn: Any, batch: pa.RecordBatch) -> list[tuple[int, str]]:
        """Rows known to be refused before they are sent (a limit the connector knows), with the reason."""
        return []

    def timed_out(self, error: BaseException) -> str | None:
        """What to do when ``error`` is a timeout (a held lock, a stalled network); None for other errors."""
        return None

    def close(self, conn: Any) -> None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 — closing a broken connection may fail too
            pass


@dataclass
class PartitionJob:
    """The ``mapInArrow`` function: writes a partition's record batches, yields how many rows it wrote
    and every row the server refused (payload, reason, offset; see rejects.py)."""

    connector: Connector
    batch_id: int
    output: str = ""
    key: tuple[str, ...] = ()

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        connector, conn, written = self.connector, None, 0
        refused: list[tuple[str, str, str]] = []

        def drop() -> None:
            nonlocal conn
            if conn is not None:
                connector.close(conn)
            conn = None

        def attempt(batch: pa.RecordBatch) -> list[tuple[int, str]]:
            nonlocal conn
            if conn is None:
                conn = connector.connect()
            ahead = connector.screen(conn, batch)  # rows known to be refused are not sent at all
            rest, positions = without(batch, ahead) if ahead else (batch, None)
            if not rest.num_rows:
                return ahead
            later = write_isolating(lambda part, first: connector.write(conn, part, self.batch_id, written + first),
                                    rest, lambda exc: connector.refusal(conn, exc))
            return ahead + [(positions[row] if positions else row, reason) for row, reason in later]

        try:
            for batch in batches:
                if batch.num_rows:  # an empty partition opens no connection
                    bad = retrying(partial(attempt, batch), transient=connector.transient, retry_for_s=connector.retry_for_s,
                                   what=connector.what, secret=connector.secret, on_failure=drop,
                                   timed_out=connector.timed_out)
                    refused += [(row_json(batch, row), reason, row_offset(self.output, batch, row, self.key))
                                for row, reason in sorted(bad)]
                    if not written:
                        reached("mid-write", self.batch_id, connector.what)
                    written += batch.num_rows - len(bad)
            reached("partition-written", self.batch_id, connector.what)
        finally:
            drop()
        yield partition_result(written, refused)


class BatchFunction:
    """The ``foreachBatch`` function: write every partition of the batch from the executors.

    ``prepare(batch_df)`` may reshape the batch first (e.g. one ordered partition). An error from
    an executor comes back as the one-line SinkError it raised, not as a worker traceback. Rows
    the server refused go to ``rejected`` (a folder, see rejects.py) with one warning per batch;
    without one, they fail the batch.

    >>> query = df.writeStream.foreachBatch(BatchFunction(connector)).start()  # doctest: +SKIP
    """

    def __init__(self, connector: Connector, prepare: Callable[[Any], Any] = lambda df: df, *, output: str = "",
                 key: tuple[str, ...] = (), rejected: str | Path | None = None):
        self.connector = connector
        self.prepare = prepare
        self.output, self.key = output, tuple(key)
        self.store = RejectStore(Path(rejected), output) if rejected else None
        #: rows written and rows refused (payload, reason, offset) by the last batch (for logs and tests)
        self.last_rows = 0
        self.last_refused: list[tuple[str, str, str]] = []

    def __call__(self, batch_df, batch_id: int) -> None:
        reached("planned", batch_id, self.connector.what)
        job = PartitionJob(self.connector, batch_id, self.output, self.key)
        try:
            results = self.prepare(batch_df).mapInArrow(job, PARTITION_RESULT).collect()
        except Exception as exc:
            raise_if_interrupted(exc)
            message = sink_error_message(exc)
            if message is None:
                raise
            raise SinkError(message) from None
        self.last_rows = sum(row["rows"] for row in results)
        self.last_refused = [(r["payload"], r["reason"], r["offset"]) for r in results if r["reason"] is not None]
        if self.last_refused:
            self._keep_refused(batch_id)
        reached("written", batch_id, self.connector.what)

    def _keep_refused(self, batch_id: int) -> None:
        keep_refused(self.store, self.last_refused, batch_id, self.output, self.connector.what)


def keep_refused(store: RejectStore | None, refused: list[tuple[str, str, str]], batch_id: int, output: str,
                 what: str) -> None:
    """Keep rows a destination refused (payload, reason, offset) as the run's dead letters, with one warning;
    without a ``store`` they fail the batch in one line."""
    count, first = len(refused), refused[0][1]
    if store is None:
        raise SinkError(f"{what} refused {count} row(s) of output {output!r} and this write has nowhere to keep "
                        f"them: {first}")
    new = store.save(batch_id, refused)
    log.warning("speedlayer: %s: %d row%s refused by %s in batch %d (%d not seen before), kept as dead letters in "
                "%s; first: %s", output, count, "" if count == 1 else "s", what, batch_id, new, store.folder, first)


def sink_error_message(error: BaseException) -> str | None:
    """The message of a speedlayer error raised in a Python worker (a sink's writer, a source's
    reader), found in Spark's wrapped error text: the last one, which is the cause.

    >>> sink_error_message(RuntimeError("Traceback ...\\nspeedlayer.errors.SinkError: lost X for 3s\\n at ..."))
    'lost X for 3s'
    >>> sink_error_message(RuntimeError("... speedlayer.core.errors.SourceError: entries were deleted\\n ..."))
    'entries were deleted'
    """
    found = _ERROR_LINE.findall(str(error))
    return found[-1].strip() if found else None
