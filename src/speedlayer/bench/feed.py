"""Paced vehicle events made outside Spark, each stamped with its creation time.

A ``Feed`` writes JSON-lines events at a fixed rate either to a TCP socket (read by the
``socket://`` source, micro-batch and continuous) or as files into a landing directory (read by
``files://``, for available-now). An event's ``event_time`` is the wall-clock moment the feed
wrote it, so ``sink time - event_time`` is its end-to-end latency; the payload fields (vehicle,
speed, position) come from templates made by the generator, so zones and over-speeding look like
the generator's.

    feed = SocketFeed(templates, rate=5000); feed.listen(); ...; feed.arm(); feed.start(); feed.stop()
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from speedlayer.core.errors import SpeedlayerError

#: how often the feed wakes up to write the events that are due
TICK_S = 0.002


@dataclass(frozen=True)
class Template:
    """The parts of an event that do not depend on when it is sent."""

    vehicle_id: str
    speed_kmh: float
    lat: float
    lon: float


def templates_from_generator(spark, count: int, vehicles: int, seed: int = 7) -> list[Template]:
    """``count`` events of the built-in generator (no duplicates, late or malformed ones), as templates.

    >>> templates_from_generator(spark, 1000, 100)[0].vehicle_id  # doctest: +SKIP
    'V0000'
    """
    import json

    from speedlayer.sources import open_source

    source = open_source(f"generator://?seed={seed}&vehicles={vehicles}&late=0&duplicates=0&malformed=0"
                         "&disorder=0s&start=2026-01-01T00:00:00Z")
    rows = source.read_batch(spark, count).select("value").collect()
    out = []
    for row in rows:
        e = json.loads(row.value)
        out.append(Template(e["vehicle_id"], float(e["speed_kmh"]), float(e["lat"]), float(e["lon"])))
    return out


def iso_ms(epoch_ms: int) -> str:
    """ISO-8601 UTC with milliseconds, as the wire format writes it.

    >>> iso_ms(1_700_000_000_123)
    '2023-11-14T22:13:20.123Z'
    """
    return datetime.fromtimestamp(epoch_ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def event_line(n: int, t: Template, stamp: str) -> str:
    """One wire-format JSON line for event ``n`` created at ``stamp``.

    >>> event_line(7, Template("V0001", 42.5, 52.5, 13.4), "2026-01-01T00:00:00.000Z")
    '{"event_id":"b-7","vehicle_id":"V0001","event_time":"2026-01-01T00:00:00.000Z","speed_kmh":42.5,"lat":52.5,"lon":13.4}\\n'
    """
    return (f'{{"event_id":"b-{n}","vehicle_id":"{t.vehicle_id}","event_time":"{stamp}",'
            f'"speed_kmh":{t.speed_kmh},"lat":{t.lat},"lon":{t.lon}}}\n')


class Feed:
    """Writes ``rate`` events per second from ``start()`` to ``stop()`` in a background thread.

    Events due at a tick are written together and stamped with that tick's millisecond, so the
    stamp is never later than the moment the bytes leave the process. ``produced`` counts them;
    ``cpu_s`` is the feed thread's own CPU time (the bench subtracts it: it is not Spark's work).
    """

    def __init__(self, templates: list[Template], rate: int):
        if not templates:
            raise ValueError("the feed needs at least one template event")
        self.templates, self.rate = templates, rate
        self.produced = 0
        self.cpu_s = 0.0
        self.started_at = self.stopped_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def write(self, lines: str) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="bench-feed", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._error is not None:
            raise SpeedlayerError(f"the bench feed failed: {self._error}") from self._error

    @property
    def produced_rate(self) -> float:
        span = (self.stopped_at or time.time()) - self.started_at
        return self.produced / span if span > 0 else 0.0

    def _loop(self) -> None:
        cpu0 = time.thread_time()
        templates, count = self.templates, len(self.templates)
        t0 = self.started_at = time.time()
        try:
            while not self._stop.is_set():
                now = time.time()
                due = int((now - t0) * self.rate) - self.produced
                if due > 0:
                    stamp = iso_ms(int(now * 1000))
                    first = self.produced
                    self.write("".join(event_line(n, templates[n % count], stamp) for n in range(first, first + due)))
                    self.produced += due
                self.cpu_s = time.thread_time() - cpu0  # kept current: the bench samples it mid-run
                self._stop.wait(TICK_S)
        except BaseException as exc:  # noqa: BLE001 — reported by stop()
            self._error = exc
        finally:
            self.stopped_at = time.time()
            self.cpu_s = time.thread_time() - cpu0
            self.close()

    def close(self) -> None:
        """Release what the feed holds (sockets, an open file)."""


def _closed_by_peer(conn: socket.socket) -> bool:
    """Whether the other side has already closed (the runner's connection check does at once)."""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


class SocketFeed(Feed):
    """A one-client line server on 127.0.0.1: ``uri`` is what ``--source`` takes.

    The runner's source check opens and closes a connection before the query starts: call
    ``arm()`` after that check, and the feed writes to the next connection only (Spark's).
    """

    def __init__(self, templates: list[Template], rate: int):
        super().__init__(templates, rate)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self.uri = f"socket://127.0.0.1:{self.port}"
        self._armed = threading.Event()
        self._client: socket.socket | None = None
        self._connected = threading.Event()
        threading.Thread(target=self._accept, name="bench-feed-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            if self._armed.is_set() and self._client is None and not _closed_by_peer(conn):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._client = conn
                self._connected.set()
            else:
                conn.close()

    def arm(self) -> None:
        self._armed.set()

    def wait_connected(self, timeout: float) -> bool:
        return self._connected.wait(timeout)

    def write(self, lines: str) -> None:
        if self._client is not None:
            self._client.sendall(lines.encode())

    def close(self) -> None:
        for s in (self._client, self._server):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass


class FilesFeed(Feed):
    """JSON-lines files in ``landing``, a new file every ``file_every_s`` (written, then renamed into place)."""

    def __init__(self, templates: list[Template], rate: int, landing: Path, file_every_s: float = 0.5):
        super().__init__(templates, rate)
        self.landing = Path(landing)
        self.landing.mkdir(parents=True, exist_ok=True)
        self.uri = f"files://{self.landing.resolve()}?format=json"
        self.file_every_s = file_every_s
        self._buffer: list[str] = []
        self._opened = 0.0
        self._files = 0

    def write(self, lines: str) -> None:
        self._buffer.append(lines)
        now = time.time()
        if not self._opened:
            self._opened = now
        if now - self._opened >= self.file_every_s:
            self.flush()

    def flush(self) -> None:
        if not self._buffer:
            return
        name = f"events-{self._files:06d}.jsonl"
        tmp = self.landing / f".{name}.tmp"
        tmp.write_text("".join(self._buffer))
        os.replace(tmp, self.landing / name)
        self._files += 1
        self._buffer.clear()
        self._opened = 0.0

    def close(self) -> None:
        self.flush()
