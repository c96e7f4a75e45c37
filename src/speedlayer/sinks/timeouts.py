"""Bounds on every database call, derived from ``retry_for``, so that nothing waits forever.

A held lock or a network that swallows packets would otherwise block a write for good, and
``retry_for`` never gets a say. Each statement gets ``statement_s(retry_for)``: the server cancels
it (PostgreSQL ``statement_timeout`` and ``lock_timeout``; MariaDB ``max_statement_time``,
``lock_wait_timeout``, ``innodb_lock_wait_timeout``), the error is transient, and the write is
tried again until ``retry_for`` is spent. Where the server cannot answer (a stalled network), the
client gives up ``GRACE_S`` later: PyMySQL's read and write timeouts, and for PostgreSQL
``cut_after``, which shuts the connection's socket under a blocked call.
"""

from __future__ import annotations

import math
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: the longest and shortest bound on one statement (seconds)
MAX_STATEMENT_S, MIN_STATEMENT_S = 60.0, 1.0
#: how long past the server's own bound the client waits for any answer (a stalled network)
GRACE_S = 5.0
#: longest wait to connect
CONNECT_TIMEOUT_S = 10


def statement_s(retry_for_s: float) -> float:
    """How long one statement may take: a third of ``retry_for`` (so several tries fit), 1 s to 60 s.

    >>> statement_s(120), statement_s(10), statement_s(1), statement_s(3600)
    (40.0, 3.3, 1.0, 60.0)
    """
    return round(min(max(retry_for_s / 3, MIN_STATEMENT_S), MAX_STATEMENT_S), 1)


def connect_s(statement_seconds: float) -> int:
    """How long to wait for a connection: the statement bound, 2 s (libpq's least) to 10 s.

    >>> connect_s(40.0), connect_s(1.0)
    (10, 2)
    """
    return int(min(max(math.ceil(statement_seconds), 2), CONNECT_TIMEOUT_S))


def lock_timeout_lines(seconds: float) -> str:
    """PostgreSQL connection ``options`` that bound each statement and each lock wait.

    >>> lock_timeout_lines(3.3)
    '-c statement_timeout=3300 -c lock_timeout=3300'
    """
    ms = int(seconds * 1000)
    return f"-c statement_timeout={ms} -c lock_timeout={ms}"


@contextmanager
def cut_after(seconds: float, fileno: int) -> Iterator[threading.Event]:
    """Shut the socket ``fileno`` down if the block takes longer than ``seconds``: a call blocked on
    it then fails as a lost connection instead of waiting forever. Yields an Event set if it did.

    >>> with cut_after(5, -1) as fired: pass
    >>> fired.is_set()
    False
    """
    fired = threading.Event()

    def cut() -> None:
        fired.set()
        try:
            dup = socket.socket(fileno=os.dup(fileno))
        except OSError:
            return
        try:
            dup.shutdown(socket.SHUT_RDWR)  # shuts the connection itself, not only this descriptor
        except OSError:
            pass
        finally:
            dup.close()

    timer = threading.Timer(seconds, cut)
    timer.daemon = True
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()


def timeout_hint(what: str, seconds: float) -> str:
    """What to do when writes kept timing out.

    >>> timeout_hint("PostgreSQL at db:5432/fleet", 3.3)[:60]
    'each try waited over 3.3s (the statement bound): another ses'
    """
    return (f"each try waited over {seconds:g}s (the statement bound): another session may hold a lock on the table "
            f"(PostgreSQL: pg_locks; MySQL/MariaDB: SHOW PROCESSLIST), or the network to {what} stalls; "
            "release it or raise retry_for, then restart the run (the batch is replayed from the checkpoint)")
