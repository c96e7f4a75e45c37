"""The latest results of a run, for the views: newest rows per output, a rolling feed of event-like
outputs (alerts), and the latest position of every entity that reports one (vehicles).

Filled by the console sinks (``show_batch``) and by the dashboard's tap query; read by the
dashboard. Thread-safe; values are kept JSON-ready.
"""

from __future__ import annotations

import datetime as dt
import decimal
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Any

from speedlayer.sinks.console import BatchView

#: rows kept in each rolling feed
FEED_ROWS = 100
#: entities whose position the map keeps: the ones heard from most recently (a stream of ever new
#: keys must not grow the driver's memory without end)
MAX_POSITIONS = 20_000


def plain(value: Any) -> Any:
    """A cell as JSON takes it: times as ISO-8601 text, decimals as floats.

    >>> plain(dt.datetime(2026, 11, 22, 10, 0, 3, 250000))
    '2026-11-22T10:00:03.250'
    """
    if isinstance(value, dt.datetime):
        return value.isoformat(timespec="milliseconds")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


class ResultsFeed:
    """What the outputs produced lately.

    >>> feed = ResultsFeed(feeds=("alerts",))
    >>> feed.show_batch(BatchView("fleet", "alerts", 3, ["event_id"], [("e-1",)], 1))
    >>> feed.snapshot()["feeds"]["alerts"][0]["event_id"]
    'e-1'
    """

    def __init__(self, feeds: Iterable[str] = (), feed_rows: int = FEED_ROWS, max_positions: int = MAX_POSITIONS):
        self._lock = threading.Lock()
        self._latest: dict[str, dict[str, Any]] = {}
        self._feeds = {name: deque(maxlen=feed_rows) for name in feeds}
        self._positions: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._positions_batch = -1
        self._max_positions = max_positions
        #: outputs whose rows arrive from a console sink (the tap need not compute them again)
        self.fed_by_sink: set[str] = set()

    def show_batch(self, view: BatchView) -> None:
        rows = [[plain(v) for v in row] for row in view.rows]
        with self._lock:
            self._latest[view.output] = {"batch_id": view.batch_id, "columns": list(view.columns), "rows": rows,
                                         "total": view.total, "at_ms": int(time.time() * 1000)}
            feed = self._feeds.get(view.output)
            if feed is not None:
                for row in reversed(rows):  # rows come newest first; the feed keeps newest first
                    feed.appendleft(dict(zip(view.columns, row)))

    def set_positions(self, batch_id: int, rows: list[dict[str, Any]], key: str) -> None:
        """Merge the latest position of each entity (rows with ``key``, lat, lon, speed, time); past
        ``max_positions`` entities, the ones heard from longest ago are forgotten.

        >>> feed = ResultsFeed(max_positions=1)
        >>> feed.set_positions(0, [{"id": "a", "lat": 1}, {"id": "b", "lat": 2}], "id")
        >>> [p["id"] for p in feed.snapshot()["positions"]]
        ['b']
        """
        with self._lock:
            for row in rows:
                entity = str(row[key])
                self._positions[entity] = {k: plain(v) for k, v in row.items()}
                self._positions.move_to_end(entity)
            while len(self._positions) > self._max_positions:
                self._positions.popitem(last=False)
            self._positions_batch = batch_id

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "latest": {k: dict(v) for k, v in self._latest.items()},
                "feeds": {k: list(v)[:FEED_ROWS] for k, v in self._feeds.items()},
                "positions": list(self._positions.values()),
                "positions_batch": self._positions_batch,
            }
