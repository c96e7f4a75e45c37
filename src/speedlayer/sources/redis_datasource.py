"""The Spark side of the Redis Streams source: a Python Data Source with offsets, ranges and Arrow reads.

The stream reader plans on the driver (inside Spark's Python source runner, with redis-py) and is
pickled to the executors without any connection; ``read`` opens its own (``RedisLocation.data_client``)
and yields RAW record batches. See ``speedlayer.sources.redis_streams`` for the options and
docs/design.md ("Redis Streams source") for why offsets, admission control and reads look so.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from speedlayer.core.schemas import RAW_SCHEMA
from speedlayer.sources.redis_location import RedisLocation
from speedlayer.sources.redis_offsets import (
    Advancer,
    LostRange,
    StreamInfo,
    entry_order,
    report_loss,
    stream_infos,
    trimmed_after,
    untouched_since,
)

FORMAT = "speedlayer_redis_streams"
#: offset entry counting the empty batches after ``max_events`` was reached (not a stream key)
IDLE = "_idle_batches"

def _entry(entry_id: str, seq: int, read: int) -> dict[str, Any]:
    return {"id": entry_id, "seq": seq, "read": read}


class KeyRange(InputPartition):
    """Entries of ``key`` with ``start < id <= end``; ``expected``: how many it held when it was planned."""

    def __init__(self, key: str, start: str, end: str, expected: int | None = None):
        self.key, self.start, self.end, self.expected = key, start, end, expected

    def __repr__(self) -> str:
        return f"KeyRange({self.key} ({self.start} .. {self.end}])"


def read_range(spec: dict[str, Any], password: str | None, part: KeyRange) -> Iterator:
    """RAW Arrow record batches of one key range, ``fetch_size`` entries per XRANGE call.

    Connection problems and error replies raise SourceError (one line, no password).
    """
    import pyarrow as pa
    import redis

    schema = _arrow_schema()
    size = int(spec["fetch_size"])
    cursor = part.start
    location = RedisLocation(spec["host"], spec["port"], spec["db"], spec.get("username"), password, (part.key,))
    client = location.data_client()
    try:
        while True:
            try:
                with gc_paused():
                    entries = client.execute_command("XRANGE", part.key, f"({cursor}", part.end, "COUNT", size)
            except redis.exceptions.RedisError as exc:
                raise location.failure(exc) from None
            if not entries:
                return
            ids, values = split_entries(entries)
            yield _record_batch(pa, schema, part.key, ids, values)
            cursor = ids[-1].decode()
            if len(ids) < size or cursor == part.end:
                return
    finally:
        client.close()


def checked_range(spec: dict[str, Any], password: str | None, part: KeyRange) -> Iterator:
    """``read_range``, then a check that the range held what it held when planned.

    Entries in a planned range can only disappear (new ids come after it): fewer entries than
    planned means some were deleted since, and a replay would read less than the first attempt.
    """
    read, first = 0, None
    for batch in read_range(spec, password, part):
        if first is None and batch.num_rows:
            first = batch.column(2)[0].as_py().rpartition("/")[2]
        read += batch.num_rows
        yield batch
    if part.expected is not None and read < part.expected:
        upto = None if first else part.end
        report_loss(LostRange(part.key, part.start, first, upto, part.expected - read),
                    bool(spec.get("fail_on_data_loss", True)))


@contextmanager
def gc_paused():
    """No cyclic garbage collection inside the block (restored after, if it was on).

    A reply of 10,000 entries is 20,000 new lists; while hiredis builds them the collector runs
    dozens of times and walks them again and again, about two thirds of the read's CPU. They hold
    only bytes, so skipping the collector creates no garbage it would have to find.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def split_entries(entries: list) -> tuple[list[bytes], list[bytes | None]]:
    """Entry ids and their ``value`` field (None when an entry has none) from a raw XRANGE reply.

    >>> split_entries([[b"1-0", [b"value", b"a"]], [b"2-0", [b"x", b"1", b"value", b"b"]], [b"3-0", [b"x", b"1"]]])
    ([b'1-0', b'2-0', b'3-0'], [b'a', b'b', None])
    """
    ids = [entry[0] for entry in entries]
    values = [fields[1] if len(fields) == 2 and fields[0] == b"value" else _value_field(fields)
              for _, fields in entries]
    return ids, values


def _value_field(fields: list[bytes] | None) -> bytes | None:
    fields = fields or []
    return next((fields[i + 1] for i in range(0, len(fields) - 1, 2) if fields[i] == b"value"), None)


def _arrow_schema():
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(RAW_SCHEMA, timezone="UTC")


def _record_batch(pa, schema, key: str, ids: list[bytes], values: list[bytes | None]):
    import pyarrow.compute as pc

    id_array = pa.array(ids, pa.binary()).cast(pa.string())
    try:
        value_array = pa.array(values, pa.binary()).cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: keep it readable, decode sends it to dead letters
        value_array = pa.array([v.decode("utf-8", "replace") if v is not None else None for v in values], pa.string())
    millis = pc.cast(pc.list_element(pc.split_pattern(id_array, "-", max_splits=1), 0), pa.int64())
    return pa.RecordBatch.from_arrays(
        [
            value_array,
            pa.array([key] * len(ids), pa.string()),
            pc.binary_join_element_wise(pa.scalar(key), id_array, "/"),
            pc.multiply(millis, 1000).cast(pa.timestamp("us", tz="UTC")),
        ],
        schema=schema,
    )


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Driver side: offsets and ranges (redis-py, lazily connected); executors: ``read``."""

    def __init__(self, spec: dict[str, Any], password: str | None):
        self.spec, self.password = spec, password
        self.keys: list[str] = list(spec["keys"])
        self.quotas: dict[str, int] | None = spec.get("quotas")
        self._client = None
        self._advancer: Advancer | None = None
        self._targets: dict[str, StreamInfo | None] | None = None  # availableNow: the ends at its start

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "_advancer": None}

    # connections (driver only) -------------------------------------------------------------------
    def _redis(self):
        if self._client is None:
            location = RedisLocation(self.spec["host"], self.spec["port"], self.spec["db"],
                                     self.spec.get("username"), self.password, tuple(self.keys))
            self._client = location.client()
            self._advancer = Advancer(self._client)
        return self._client

    def _infos(self) -> dict[str, StreamInfo | None]:
        return stream_infos(self._redis(), self.keys)

    # offsets ---------------------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        latest = self.spec["starting"] == "latest"
        pinned = self.spec.get("latest_ids")
        if latest and pinned:  # the run's queries all start where the run did
            return {key: _entry(pinned[key][0], pinned[key][1], 0) if key in pinned else _entry("0-0", 0, 0)
                    for key in self.keys}
        offset = {}
        for key, info in self._infos().items():
            if info is None:
                offset[key] = _entry("0-0", 0, 0)
            elif latest:
                offset[key] = _entry(info.last, max(info.added, 0), 0)
            else:
                offset[key] = _entry("0-0", max(info.added - info.length, 0), 0)
        return offset

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.spec.get("max_per_trigger")
        return ReadMaxRows(int(limit)) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._targets = self._infos()

    def reportLatestOffset(self) -> dict | None:
        infos = self._infos()
        return {key: {"id": info.last, "seq": info.added} for key, info in infos.items() if info is not None} or None

    def _start_of(self, start: dict, key: str) -> dict[str, Any]:
        # A key that is new to the checkpoint (more shards than before) is read from its beginning.
        return start.get(key) or _entry("0-0", 0, 0)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next batch: per key the id ``want`` entries further, at most to the target.

        Where the whole rest of a key fits (and nothing in it was deleted) its end is read off
        XINFO; otherwise the Lua walker counts entries on the server.
        """
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        current = self._infos()
        infos = self._targets if self._targets is not None else current
        end = {key: self._continued(start, key, current.get(key)) for key in self.keys}
        if budget is None and self.quotas is None:
            for key in self.keys:
                self._take(end, key, infos.get(key), None)
            return end
        room = {key: (self.quotas[key] - end[key]["read"]) if self.quotas else None for key in self.keys}

        def advance(key: str, want: int) -> int:
            if room[key] is not None:
                want = min(want, room[key])
            got = self._take(end, key, infos.get(key), want)
            if room[key] is not None:
                room[key] -= got
            return got

        if budget is None:
            for key in self.keys:
                advance(key, room[key])
            return self._idle_tick(start, end)
        share, extra = divmod(budget, len(self.keys))
        full = []
        for i, key in enumerate(self.keys):
            want = share + (1 if i < extra else 0)
            got = advance(key, want)
            budget -= got
            if got == want:
                full.append(key)  # may hold more: offered what the others left
        for key in full:
            if budget <= 0:
                break
            budget -= advance(key, budget)
        return self._idle_tick(start, end)

    def _continued(self, start: dict, key: str, info: StreamInfo | None) -> dict[str, Any]:
        """Where the next batch of ``key`` starts: the end of the last one, past a range trimmed
        before it was read (which fails the query unless ``fail_on_data_loss=false``)."""
        entry = {name: value for name, value in self._start_of(start, key).items() if name != "skipped"}
        lost = trimmed_after(key, info, entry["id"], entry["seq"]) if key in start else None
        if lost is not None:
            report_loss(lost, bool(self.spec.get("fail_on_data_loss", True)))
            # Counted as read past, so the next batch's positions stay exact; the checkpoint keeps the range.
            entry["seq"] += max(lost.entries, 0)
            entry["skipped"] = lost.as_offset()
        return entry

    def _idle_tick(self, start: dict, end: dict) -> dict:
        """Once ``max_events`` is read, keep batches coming (empty ones), as the generator's source does.

        A bounded run stops a couple of batches after its last event, when the watermark has
        closed its windows; without new offsets Spark would run no further batch. Not under
        availableNow, which must reach an end.
        """
        if self.quotas is None or self._targets is not None:
            return end
        if any(end[key]["read"] < self.quotas[key] for key in self.keys):
            return end
        if any(end[key]["id"] != self._start_of(start, key)["id"] for key in self.keys):
            return end
        end[IDLE] = int(start.get(IDLE, 0)) + 1
        return end

    def _take(self, end: dict, key: str, info: StreamInfo | None, want: int | None) -> int:
        """Move ``end[key]`` forward by at most ``want`` entries (None: all), never past ``info.last``.

        ``seq`` moves by exactly the number of entries taken (the executors check that count): from
        XINFO's counts only when nothing after the start was deleted, else counted by the walker.
        """
        e = end[key]
        if info is None or (want is not None and want <= 0) or entry_order(info.last) <= entry_order(e["id"]):
            return 0
        rest = info.added - e["seq"]
        if want is None and info.added >= 0 and untouched_since(info, e["id"]):
            # everything: counted from seq (exact unless entries were deleted meanwhile)
            e.update(_entry(info.last, info.added, e["read"] + max(rest, 0)))
            return max(rest, 0)
        if want is not None and 0 <= rest <= want and untouched_since(info, e["id"]):
            e.update(_entry(info.last, info.added, e["read"] + rest))
            return rest
        self._redis()
        assert self._advancer is not None
        last, got = self._advancer(key, e["id"], info.last, want if want is not None else 2**62)
        if got:
            e.update(_entry(last, e["seq"] + got, e["read"] + got))
        return got

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        parts: list[InputPartition] = []
        for key in self.keys:
            begin, finish = self._start_of(start, key), end.get(key, {})
            first, last = begin["id"], finish.get("id")
            if last is not None and entry_order(last) > entry_order(first):
                # entries planned into this range: its positions' difference (exact, see _take), less a skipped range
                skipped = max(int(finish.get("skipped", {}).get("entries", 0)), 0)
                parts.append(KeyRange(key, first, last, int(finish["seq"]) - int(begin["seq"]) - skipped))
        return parts

    def read(self, partition: KeyRange) -> Iterator:  # type: ignore[override]
        return checked_range(self.spec, self.password, partition)

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class _BatchReader(DataSourceReader):
    """A static read of the ranges ``read_batch`` fixed on the driver."""

    def __init__(self, spec: dict[str, Any], password: str | None):
        self.spec, self.password = spec, password

    def partitions(self) -> list[InputPartition]:
        return [KeyRange(key, start, end) for key, start, end in self.spec["ranges"]]

    def read(self, partition: KeyRange) -> Iterator:  # type: ignore[override]
        return read_range(self.spec, self.password, partition)


class RedisStreamsDataSource(DataSource):
    """Spark's view of the source; options ``spec`` (JSON) and ``password`` (redacted by Spark)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return RAW_SCHEMA

    def _spec(self) -> tuple[dict[str, Any], str | None]:
        return json.loads(self.options["spec"]), self.options.get("password")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _StreamReader(*self._spec())

    def reader(self, schema: StructType) -> DataSourceReader:
        return _BatchReader(*self._spec())
