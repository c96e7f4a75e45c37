"""``redis://host:6379/0?stream=vehicles&shards=4`` — Redis Streams, read with Spark's Python Data Source API.

Each entry holds one event's JSON in its ``value`` field. With ``shards=N`` the keys are
``vehicles:0`` … ``vehicles:N-1``, one Spark input partition each; without, the key is ``vehicles``.

Offsets, kept in Spark's checkpoint, say per key the last entry id taken (``id``), its position
among all entries ever added to the key (``seq``, from XINFO's ``entries-added``) and how many
entries this query has read from it (``read``). A micro-batch is the fixed id range
``(start id, end id]`` per key, decided on the driver before the batch runs, so a restart or a
replay reads exactly the same entries. Executors read their range with XRANGE pages of
``fetch_size`` entries and hand Spark Arrow record batches (RAW: value, key = the stream key,
offset = ``<key>/<entry id>``, ingest_time = the entry id's milliseconds).

Options (Spark's camelCase spellings work too): ``stream`` (vehicles), ``shards``,
``starting_offsets`` (earliest | latest), ``max_records_per_trigger`` (spread over the keys),
``fetch_size`` (10000), ``fail_on_data_loss`` (true).

Entries deleted before the query read them (``XTRIM``, ``MAXLEN`` on the producer, ``XDEL``) fail
the query with a message naming the lost range, like Kafka's ``failOnDataLoss``: when the stream's
first entry is newer than the last entry read and entries were added in between, and when a
planned range (a replayed batch too) holds fewer entries than it held when planned. With
``fail_on_data_loss=false`` the range is logged as a warning and skipped; the offsets log keeps it
(``skipped``) with the batch that skipped it. Entries deleted before the query started are not a loss.
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any, Literal

from pydantic import BaseModel, Field
from pyspark.sql import DataFrame, SparkSession

from speedlayer.core.errors import ConfigError, SourceError
from speedlayer.core.schemas import RAW_SCHEMA
from speedlayer.core.uris import Uri, parse_options
from speedlayer.sources.base import Source, snake_case_options
from speedlayer.sources.redis_datasource import (
    FORMAT,
    IDLE,
    Advancer,
    RedisStreamsDataSource,
    entry_order,
    stream_infos,
    untouched_since,
)
from speedlayer.sources.redis_location import RedisLocation

#: run-state entry: the last ids when a run with starting_offsets=latest first started
LATEST_IDS = "redis_latest_ids"


class RedisStreamsOptions(BaseModel):
    stream: str = Field("vehicles", min_length=1, description="stream key, or the prefix of the shard keys")
    shards: int | None = Field(None, gt=0, le=4096, description="keys <stream>:0 .. <stream>:<shards-1>")
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    max_records_per_trigger: int | None = Field(None, gt=0, description="entries per micro-batch, over all keys")
    fetch_size: int = Field(10_000, gt=0, le=1_000_000, description="entries per XRANGE call on the executors")
    fail_on_data_loss: bool = Field(True, description="fail when entries were deleted before they were read; "
                                    "false: log the lost range as a warning and go on")


def parse_redis_options(uri: Uri) -> RedisStreamsOptions:
    """The URI's options; Spark's spellings (``maxRecordsPerTrigger``, ``startingOffsets``) work too.

    >>> from speedlayer.core.uris import parse_uri
    >>> parse_redis_options(parse_uri("redis://h/0?stream=v&maxRecordsPerTrigger=10")).max_records_per_trigger
    10
    """
    return parse_options(RedisStreamsOptions, snake_case_options(uri.options, "redis://"), "redis://")


def shard_quotas(keys: tuple[str, ...], max_events: int) -> dict[str, int]:
    """How many entries each key contributes to ``max_events``: key i takes ceil((N - i) / shards).

    With streams written round-robin from event 0 (``speedlayer produce``) those are exactly
    events 0 … N-1.

    >>> shard_quotas(("s:0", "s:1", "s:2"), 7)
    {'s:0': 3, 's:1': 2, 's:2': 2}
    """
    n = len(keys)
    return {key: max(0, (max_events - i + n - 1) // n) for i, key in enumerate(keys)}


class RedisStreamsSource(Source):
    """``redis://host:6379/0?stream=vehicles&shards=4`` (see the module docstring for every option)."""

    scheme = "redis"
    summary = "Redis Streams entries, read by entry id ranges (one or more shards)"

    def __init__(self, uri: Uri):
        super().__init__(uri)
        self.options = parse_redis_options(uri)
        self.location = RedisLocation.from_uri(uri, self.options.stream, self.options.shards)
        #: the ids "latest" means for this run (set by ``pin``); None: the moment each query starts
        self.latest_ids: dict[str, list] | None = None

    def pin(self, run_state: MutableMapping[str, Any]) -> None:
        """With ``starting_offsets=latest``, fix "latest" once per run, so every query starts at the same entries."""
        if self.options.starting_offsets != "latest":
            return
        pinned = run_state.get(LATEST_IDS)
        if not isinstance(pinned, dict) or set(pinned) != set(self.location.keys):
            client = self.location.reach()
            try:
                infos = stream_infos(client, self.location.keys)
            finally:
                client.close()
            pinned = {key: [info.last, max(info.added, 0)] if info else ["0-0", 0] for key, info in infos.items()}
            run_state[LATEST_IDS] = pinned
        self.latest_ids = pinned

    def describe(self) -> str:
        keys = self.location.keys
        shown = keys[0] if len(keys) == 1 else f"{keys[0]} .. {keys[-1]}"
        return f"Redis Streams {shown} at {self.location.address}/{self.location.db} (from {self.options.starting_offsets})"

    def check(self) -> None:
        """One line when Redis is unreachable or none of the stream keys exists."""
        client = self.location.reach()
        try:
            found = [key for key in self.location.keys if client.exists(key)]
            for key in found:
                kind = client.type(key)
                if kind != "stream":
                    raise SourceError(f"Redis key {key!r} at {self.location.address} holds a {kind}, not a stream: "
                                      "use another stream name")
        finally:
            client.close()
        if not found:
            keys = self.location.keys
            named = ", ".join(keys) if len(keys) <= 4 else f"{keys[0]} .. {keys[-1]}"
            raise SourceError(f"no stream {named} in Redis db {self.location.db} at {self.location.address}: "
                              f"write some with speedlayer produce --to '{self.uri.display}' or fix stream/shards")

    def _spec(self, **extra: Any) -> dict[str, Any]:
        loc, o = self.location, self.options
        return {"host": loc.host, "port": loc.port, "db": loc.db, "username": loc.username, "keys": list(loc.keys),
                "starting": o.starting_offsets, "max_per_trigger": o.max_records_per_trigger,
                "fetch_size": o.fetch_size, "fail_on_data_loss": o.fail_on_data_loss, "latest_ids": self.latest_ids,
                **extra}

    def _load(self, reader, spec: dict[str, Any]) -> DataFrame:
        reader = reader.format(FORMAT).option("spec", json.dumps(spec))
        if self.location.password is not None:
            reader = reader.option("password", self.location.password)
        return reader.load().select(*RAW_SCHEMA.fieldNames())

    def read_stream(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        """The RAW stream; ``max_events`` N reads key i's first ceil((N - i) / shards) entries.

        >>> RedisStreamsSource(parse_uri("redis://localhost/0?stream=v&shards=4")).read_stream(spark)  # doctest: +SKIP
        """
        spark.dataSource.register(RedisStreamsDataSource)
        quotas = shard_quotas(self.location.keys, max_events) if max_events is not None else None
        return self._load(spark.readStream, self._spec(quotas=quotas))

    def read_batch(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        """The entries a new stream query would read, as a static DataFrame (the end is fixed now).

        It starts at the first entries, or with ``starting_offsets=latest`` at the ids ``pin`` fixed.

        >>> RedisStreamsSource(parse_uri("redis://localhost/0?stream=v")).read_batch(spark, 1000)  # doctest: +SKIP
        """
        starts = dict.fromkeys(self.location.keys, "0-0")
        if self.options.starting_offsets == "latest":
            if self.latest_ids is None:
                raise ConfigError("a batch read of Redis Streams from latest needs the run's pinned ids: "
                                  "pin the source first, or use starting_offsets=earliest")
            starts.update({key: ids[0] for key, ids in self.latest_ids.items()})
        client = self.location.reach()
        try:
            quotas = shard_quotas(self.location.keys, max_events) if max_events is not None else None
            advancer, ranges = Advancer(client), []
            for key, info in stream_infos(client, self.location.keys).items():
                if info is None:
                    continue
                first, last = starts[key], info.last
                whole = first == "0-0" and info.length <= (quotas or {}).get(key, 0) and untouched_since(info, "0-0")
                if quotas is not None and not whole:
                    last, _ = advancer(key, first, info.last, quotas[key])
                if entry_order(last) > entry_order(first):
                    ranges.append((key, first, last))
        finally:
            client.close()
        spark.dataSource.register(RedisStreamsDataSource)
        return self._load(spark.read, self._spec(ranges=ranges))

    def lag(self, progress_source: dict) -> int | None:
        """Entries added to the stream keys after the batch's end: XINFO's ``entries-added`` minus the
        end offset's ``seq`` per key (Redis 7+; None before). One XINFO per key and batch."""
        end = progress_source.get("endOffset")
        end = json.loads(end) if isinstance(end, str) else end
        if not isinstance(end, dict):
            return None
        if getattr(self, "_lag_client", None) is None:
            self._lag_client = self.location.client()
        infos = stream_infos(self._lag_client, self.location.keys)
        total = 0
        for key, info in infos.items():
            if info is None or info.added < 0:
                return None
            seq = (end.get(key) or {}).get("seq", 0)
            total += max(0, info.added - int(seq))
        return total

    def batch_rows(self, interval_ms: int) -> int | None:
        return self.options.max_records_per_trigger

    def events_read(self, progress_source: dict) -> int | None:
        """Entries the query has read so far, from the ``read`` counts of its end offset."""
        end = progress_source.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                return None
        if not isinstance(end, dict) or not end:
            return None
        try:
            return sum(int(entry["read"]) for key, entry in end.items() if key != IDLE)
        except (KeyError, TypeError, ValueError):
            return None
