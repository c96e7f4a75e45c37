"""A minimal Redis connection for the two hot paths: reading stream entries and pipelined XADD.

redis-py parses every reply element in Python (about 11 µs per stream entry here, ~90k entries/s
per process). Stream replies have a fixed shape, so this module matches each entry with one
compiled pattern and hands back raw bytes ready for Arrow (~1 µs per entry); anything unusual (an
entry with other fields, a reply split across reads) goes through a small general RESP2 parser.
Everything else (checks, XINFO, scripts) uses redis-py. Plain TCP only, RESP2, AUTH and SELECT.

    >>> with RedisWire("127.0.0.1", 6379) as wire:  # doctest: +SKIP
    ...     ids, values = wire.xrange("vehicles:0", "-", "+", 10_000)
"""

from __future__ import annotations

import re
import socket
from typing import Sequence

_ENTRY = re.compile(rb"\*2\r\n\$\d+\r\n(\d+-\d+)\r\n\*2\r\n\$5\r\nvalue\r\n\$(\d+)\r\n")
_ARRAY_HEAD = re.compile(rb"\*(-?\d+)\r\n")
_XADD_REPLY = re.compile(rb"\$\d+\r\n[0-9-]+\r\n|-([^\r\n]*)\r\n")
_RECV = 1 << 20


class WireError(Exception):
    """An error reply from the server, or a connection that broke."""


class _Incomplete(Exception):
    """The buffer ends before the element does."""


def _line(buf: bytearray, pos: int) -> tuple[bytes, int]:
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise _Incomplete
    return bytes(buf[pos:end]), end + 2


def parse(buf: bytearray, pos: int = 0):
    """One RESP2 element at ``pos``: ``(value, next_pos)``; raises _Incomplete when cut short.

    >>> parse(bytearray(b"*2\\r\\n$1\\r\\na\\r\\n:5\\r\\n"))
    ([b'a', 5], 17)
    """
    if pos >= len(buf):
        raise _Incomplete
    kind = buf[pos:pos + 1]
    line, pos = _line(buf, pos + 1)
    if kind == b"$":
        size = int(line)
        if size < 0:
            return None, pos
        if len(buf) < pos + size + 2:
            raise _Incomplete
        return bytes(buf[pos:pos + size]), pos + size + 2
    if kind == b"*":
        size = int(line)
        if size < 0:
            return None, pos
        items = []
        for _ in range(size):
            item, pos = parse(buf, pos)
            items.append(item)
        return items, pos
    if kind == b"+":
        return line, pos
    if kind == b":":
        return int(line), pos
    if kind == b"-":
        return WireError(line.decode("utf-8", "replace")), pos
    raise WireError(f"unexpected reply byte {kind!r} from Redis")


def command(*args: bytes | str | int) -> bytes:
    """One command in RESP2 wire form.

    >>> command("PING")
    b'*1\\r\\n$4\\r\\nPING\\r\\n'
    """
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class RedisWire:
    """A blocking connection; open it with ``with`` or ``connect()``."""

    def __init__(self, host: str, port: int, db: int = 0, username: str | None = None,
                 password: str | None = None, timeout: float = 60.0):
        self.host, self.port, self.db = host, port, db
        self.username, self.password, self.timeout = username, password, timeout
        self._sock: socket.socket | None = None
        self._buf = bytearray()

    def connect(self) -> "RedisWire":
        try:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as exc:
            raise WireError(f"cannot reach Redis at {self.host}:{self.port}: {exc.strerror or exc}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.password is not None:
            auth = ("AUTH", self.username, self.password) if self.username else ("AUTH", self.password)
            self.call(*auth)
        if self.db:
            self.call("SELECT", self.db)
        return self

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> "RedisWire":
        return self.connect()

    def __exit__(self, *exc) -> None:
        self.close()

    def _more(self) -> None:
        assert self._sock is not None, "connect() first"
        try:
            chunk = self._sock.recv(_RECV)
        except OSError as exc:
            raise WireError(f"connection to Redis at {self.host}:{self.port} failed: {exc}") from None
        if not chunk:
            raise WireError(f"Redis at {self.host}:{self.port} closed the connection")
        self._buf.extend(chunk)

    def _send(self, data: bytes) -> None:
        assert self._sock is not None, "connect() first"
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise WireError(f"connection to Redis at {self.host}:{self.port} failed: {exc}") from None

    def _reply(self):
        while True:
            try:
                value, pos = parse(self._buf)
            except _Incomplete:
                self._more()
                continue
            del self._buf[:pos]
            if isinstance(value, WireError):
                raise value
            return value

    def call(self, *args: bytes | str | int):
        """Send one command and return its parsed reply (an error reply raises WireError)."""
        self._send(command(*args))
        return self._reply()

    def xrange(self, key: str, start: str, end: str, count: int) -> tuple[list[bytes], list[bytes | None]]:
        """Entry ids and their ``value`` field (None when an entry has none), as raw bytes.

        ``start``/``end`` are XRANGE bounds: ``-``, ``+``, an id, or ``(id`` for an exclusive start.
        """
        self._send(command("XRANGE", key, start, end, "COUNT", count))
        buf = self._buf
        while True:
            head = _ARRAY_HEAD.match(buf)
            if head is not None:
                break
            if buf[:1] == b"-":
                self._reply()  # raises the server's error
            self._more()
        total, pos = int(head.group(1)), head.end()
        ids: list[bytes] = []
        values: list[bytes | None] = []
        match = _ENTRY.match
        while len(ids) < total:
            m = match(buf, pos)
            if m is not None:
                start_at = m.end()
                end_at = start_at + int(m[2])
                if end_at + 2 <= len(buf):
                    ids.append(bytes(m[1]))
                    values.append(bytes(buf[start_at:end_at]))
                    pos = end_at + 2
                    continue
            try:
                entry, pos = parse(buf, pos)
            except _Incomplete:
                self._more()
                continue
            entry_id, fields = entry
            fields = fields or []
            ids.append(entry_id)
            values.append(next((fields[i + 1] for i in range(0, len(fields) - 1, 2) if fields[i] == b"value"), None))
        del buf[:pos]
        return ids, values

    def xadd_many(self, keys: Sequence[str], values: Sequence[bytes], field: bytes = b"value") -> None:
        """Append ``{field: value}`` to ``keys[i]`` for each i, in one pipelined round trip.

        Raises WireError with the first error reply (the other entries are still added).
        """
        head = b"*5\r\n$4\r\nXADD\r\n"
        tail = b"$1\r\n*\r\n$%d\r\n%s\r\n" % (len(field), field)
        encoded = {k: b"$%d\r\n%s\r\n" % (len(k.encode()), k.encode()) for k in set(keys)}
        self._send(b"".join(
            b"%s%s%s$%d\r\n%s\r\n" % (head, encoded[k], tail, len(v), v) for k, v in zip(keys, values)
        ))
        self._expect_replies(len(values))

    def _expect_replies(self, count: int) -> None:
        buf, seen, pos, first_error = self._buf, 0, 0, None
        while seen < count:
            m = _XADD_REPLY.match(buf, pos)
            if m is None:
                self._more()
                continue
            if m[1] is not None and first_error is None:
                first_error = m[1].decode("utf-8", "replace")
            seen += 1
            pos = m.end()
        del buf[:pos]
        if first_error is not None:
            raise WireError(first_error)
