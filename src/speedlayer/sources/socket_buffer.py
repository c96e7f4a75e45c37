"""The socket source's driver side without Spark: a bounded line buffer and the thread that fills it.

``LineBuffer`` holds the lines received and not yet freed, numbered by the run from 1. ``put``
blocks while it holds ``max_lines`` lines or ``max_bytes`` bytes; ``pump`` then stops calling
``recv``, the kernel's receive buffer fills, and TCP flow control stops the sender. Nothing is
dropped: a line waits in the sender or the kernel until the job has room for it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from itertools import islice

log = logging.getLogger(__name__)

#: bytes asked of the socket per ``recv``: with one partial line, all the pump holds beyond the buffer
CHUNK_BYTES = 1 << 16


class LineBuffer:
    """Lines numbered ``first`` .. ``received``, each with its ingest time (µs since the epoch).

    >>> buf = LineBuffer(max_lines=2, max_bytes=100)
    >>> buf.put([b"a", b"b"], 0), buf.received, buf.take(0, 2)
    (True, 2, [(b'a', 0), (b'b', 0)])
    """

    def __init__(self, max_lines: int, max_bytes: int, numbered_after: int = 0):
        self.max_lines, self.max_bytes = max_lines, max_bytes
        self._cond = threading.Condition()
        self._lines: deque[tuple[bytes, int]] = deque()
        self._bytes = 0
        self.first = numbered_after + 1
        self.closed = False

    @property
    def received(self) -> int:
        """The number of the last line received (``first - 1`` while none is held)."""
        with self._cond:
            return self.first + len(self._lines) - 1

    @property
    def held(self) -> int:
        with self._cond:
            return len(self._lines)

    def _full(self, size: int) -> bool:
        return bool(self._lines) and (len(self._lines) >= self.max_lines or self._bytes + size > self.max_bytes)

    def put(self, lines: list[bytes], ingest_us: int) -> bool:
        """Append ``lines``, waiting for room for each; False once the buffer is closed."""
        with self._cond:
            for line in lines:
                while self._full(len(line)) and not self.closed:
                    self._cond.wait()
                if self.closed:
                    return False
                self._lines.append((line, ingest_us))
                self._bytes += len(line)
        return True

    def take(self, after: int, upto: int) -> list[tuple[bytes, int]]:
        """Copies of the lines numbered ``after + 1`` .. ``upto`` that are still held."""
        with self._cond:
            begin, end = max(after + 1 - self.first, 0), max(upto + 1 - self.first, 0)
            return list(islice(self._lines, begin, end))

    def free_through(self, number: int) -> None:
        """Forget the lines numbered up to ``number`` (their batch is done), making room for more."""
        with self._cond:
            while self._lines and self.first <= number:
                self._bytes -= len(self._lines.popleft()[0])
                self.first += 1
            self.first = max(self.first, number + 1)
            self._cond.notify_all()

    def close(self) -> None:
        """Wake a waiting ``put`` for good (the query stops)."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()


def split_lines(pending: bytes, chunk: bytes, max_line_bytes: int) -> tuple[list[bytes], bytes]:
    """The complete lines in ``pending + chunk`` (without ``\\n`` or ``\\r\\n``) and the rest.

    A line longer than ``max_line_bytes`` is cut to that length (the rest of it is never held),
    so a sender that sends no newline cannot grow memory either.

    >>> split_lines(b"ab", b"c\\r\\nde\\nf", 10)
    ([b'abc', b'de'], b'f')
    >>> split_lines(b"", b"abcdef\\nxyz", 4)
    ([b'abcd'], b'xyz')
    """
    parts = chunk.split(b"\n")
    parts[0] = pending + parts[0]
    rest = parts.pop()[:max_line_bytes]
    lines = [part[:max_line_bytes] for part in parts]
    return [line[:-1] if line.endswith(b"\r") else line for line in lines], rest


def pump(conn: socket.socket, buffer: LineBuffer, max_line_bytes: int, where: str) -> None:
    """Read lines from ``conn`` into ``buffer`` until the sender hangs up or the buffer closes."""
    pending = b""
    try:
        while True:
            chunk = conn.recv(CHUNK_BYTES)
            now_us = time.time_ns() // 1000
            if not chunk:
                if pending:  # the last line without a newline, as Spark's socket source keeps it
                    buffer.put([pending], now_us)
                log.warning("%s closed the connection after line %d", where, buffer.received)
                return
            lines, pending = split_lines(pending, chunk, max_line_bytes)
            cut = sum(len(line) == max_line_bytes for line in lines)
            if cut:
                log.warning("%s: %d line(s) of max_line_bytes=%d or more, longer ones cut to it", where, cut, max_line_bytes)
            if not buffer.put(lines, now_us):
                return
    except OSError as exc:  # like Spark's socket source: the lines so far are kept, the query goes on
        if not buffer.closed:
            log.warning("the connection to %s failed after line %d (%s)", where, buffer.received, exc.strerror or exc)
    finally:
        conn.close()
