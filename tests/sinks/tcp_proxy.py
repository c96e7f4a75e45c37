"""A TCP forwarder to a real server that a test can take down and bring back (connection refused / lost),
that stalls: keeps every connection open and forwards nothing more (a blackholed network), or that
holds a client at a precise point of what it sends (a trap), e.g. inside a sink's write."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field

from tests.servers import free_port


@dataclass
class Trap:
    """Holds the first connection that is about to send ``marker`` for the ``occurrence``-th time.

    What the client sends is looked at before it is forwarded: the chunk holding that occurrence
    waits (the server has not seen it) until ``release`` is set, then goes on if the connection still
    lives. ``sprung`` is set the moment the client is held. Markers are counted per connection.
    """

    marker: bytes
    occurrence: int
    sprung: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def spring(self) -> bool:
        """Claim the trap for the calling connection (only the first one to get there is held)."""
        with self._lock:
            if self.sprung.is_set():
                return False
            self.sprung.set()
            return True


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target``. ``down()`` closes the listener and every open
    connection (clients see refused and lost connections); ``up()`` listens again on the same port.

    >>> with TcpProxy(("127.0.0.1", 5432)) as proxy: proxy.down(); proxy.up_after(2.0)  # doctest: +SKIP
    """

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._marker: bytes | None = None
        self._flowing = threading.Event()
        self._flowing.set()
        #: how many connections stalled on the marker
        self.stalls = 0
        self._trap: Trap | None = None

    def hold_at(self, marker: bytes, occurrence: int = 2) -> Trap:
        """Arm a trap (see ``Trap``) for the connections' coming traffic to the server.

        >>> trap = proxy.hold_at(b"COMMIT\\x00", 2); trap.sprung.wait(60); proxy.down(); trap.release.set()  # doctest: +SKIP
        """
        self._trap = Trap(marker, occurrence)
        return self._trap

    def up(self) -> TcpProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def down(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept(); close() alone does not
            except OSError:
                pass
            listener.close()
        with self._lock:
            conns, self._conns = self._conns, set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def up_after(self, seconds: float) -> threading.Thread:
        """Bring the proxy back after ``seconds`` (in a thread)."""
        def later() -> None:
            time.sleep(seconds)
            self.up()

        thread = threading.Thread(target=later, daemon=True)
        thread.start()
        return thread

    def stall_on(self, marker: bytes) -> None:
        self._marker = marker
        self._flowing.clear()

    def unstall(self) -> None:
        self._marker = None
        self._flowing.set()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # went down meanwhile
                    client.close()
                    server.close()
                    return
                self._conns |= {client, server}
            gate = threading.Event()  # set once this connection stalled
            for a, b, outward in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pipe, args=(a, b, gate, outward), daemon=True).start()

    def _pipe(self, source: socket.socket, dest: socket.socket, gate: threading.Event, outward: bool) -> None:
        seen, tail = 0, b""
        try:
            while data := source.recv(65536):
                if outward and self._marker is not None and self._marker in data and not gate.is_set():
                    gate.set()
                    self.stalls += 1
                while gate.is_set() and not self._flowing.wait(0.1):
                    pass
                trap = self._trap if outward else None
                if trap is not None and not trap.sprung.is_set():
                    window = tail + data  # a marker may straddle two reads
                    seen += window.count(trap.marker)
                    tail = window[-(len(trap.marker) - 1):] if len(trap.marker) > 1 else b""
                    if seen >= trap.occurrence and trap.spring():
                        trap.release.wait()
                dest.sendall(data)
        except OSError:
            pass
        for sock in (source, dest):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        with self._lock:
            self._conns -= {source, dest}

    def __enter__(self) -> TcpProxy:
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()
        if self._trap is not None:  # never leave a client held past the test
            self._trap.release.set()
