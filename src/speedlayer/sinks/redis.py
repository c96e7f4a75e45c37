"""``redis://[user:password@]host:6379/DB?prefix=fleet`` — latest state as hashes, events as a stream.

Two layouts, chosen by the output's key:

- **Latest state per entity** (outputs keyed by a time window, e.g. ``windows``): one hash per
  entity, ``<prefix>:<vehicle_id>``, holding the fields of that entity's most recent window. A Lua
  script replaces the hash only when the new row's ``window_end`` is at least the stored one, so a
  replayed or late batch can never move a vehicle back to an older window.
- **Event stream** (outputs keyed by an id, e.g. ``alerts``, ``dead-letters``; or any output with
  ``stream=KEY``): entries appended to one stream with ids ``<batch id + 1>-<row>``, rows ordered by
  the key within the batch. Before writing, the writer reads the stream's last id and skips every
  entry at or below it, so a replayed batch adds nothing and a half-written one is completed.

Why exactly once: both writes are idempotent for a batch Spark replays (same batch id, same rows),
and Spark replays an unfinished batch after a restart from the checkpoint. The stream must be
dedicated to this output and this checkpoint: a new run (fresh checkpoint) into a stream that holds
entries is refused. Values are text: numbers as Spark prints them, timestamps as ISO-8601 UTC
(``2026-11-22T10:00:10.000000Z``, fixed width, so they compare as text), booleans ``true``/``false``;
null fields are left out.

Options: ``prefix`` (key prefix, default ``<job>:<output>``), ``stream`` (stream key, default the
prefix), ``maxlen`` (trim the stream to about that many entries), ``retry_for`` (120s).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field
from pyspark.sql import DataFrame
from pyspark.sql import types as T
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from speedlayer.durations import parse_duration
from speedlayer.errors import ConfigError, SinkError
from speedlayer.pipelines.base import APPEND, UPDATE
from speedlayer.sinks.base import EXACTLY_ONCE, Sink, Target
from speedlayer.sinks.batches import BatchFunction, Connector, RetryOptions, one_line, require
from speedlayer.uris import Uri, parse_options

#: rows per Lua call (a script blocks the server while it runs: keep each one short)
ROWS_PER_SCRIPT = 500

#: KEYS: hash keys. ARGV[1]: the ordering field; then per key: its new ordering value, the number
#: of field/value pairs, the pairs. A hash is replaced only if the new value is >= the stored one.
LATEST_SCRIPT = """
local field = ARGV[1]
local pos = 2
local written = 0
for i = 1, #KEYS do
  local order = ARGV[pos]
  local n = tonumber(ARGV[pos + 1])
  local current = redis.call('HGET', KEYS[i], field)
  if (not current) or current <= order then
    redis.call('DEL', KEYS[i])
    if n > 0 then redis.call('HSET', KEYS[i], unpack(ARGV, pos + 2, pos + 1 + 2 * n)) end
    written = written + 1
  end
  pos = pos + 2 + 2 * n
end
return written
"""


class RedisOptions(RetryOptions):
    prefix: str | None = Field(None, min_length=1, description="key prefix; default <job>:<output>")
    stream: str | None = Field(None, min_length=1, description="write a stream with this key (events default to the prefix)")
    maxlen: int | None = Field(None, gt=0, description="trim the stream to about this many entries")


@dataclass(frozen=True)
class RedisServer:
    host: str
    port: int
    db: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    def connect(self) -> Any:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # No retries inside the client: the sink's own backoff (retry_for) is the one policy.
        return redis.Redis(host=self.host, port=self.port, db=self.db, username=self.username, password=self.password,
                           socket_connect_timeout=10, socket_timeout=60, retry=Retry(NoBackoff(), 0))


def text_columns(batch: pa.RecordBatch) -> list[list[str | None]]:
    """Every column as text (vectorised in Arrow): ISO-8601 UTC timestamps, ``true``/``false``.

    >>> import datetime as dt
    >>> ts = pa.array([dt.datetime(2026, 11, 22, 10, 0, 10)], pa.timestamp("us", "UTC"))
    >>> text_columns(pa.record_batch({"t": ts, "x": [1.5], "b": [True]}))
    [['2026-11-22T10:00:10.000000Z'], ['1.5'], ['true']]
    """
    out = []
    for array in batch.columns:
        kind = array.type
        if pa.types.is_timestamp(kind):
            zoned = kind.tz is not None
            array = array.cast(pa.timestamp("us", "UTC")) if zoned else array.cast(pa.timestamp("us"))
            array = pc.strftime(array, format="%Y-%m-%dT%H:%M:%S" + ("Z" if zoned else ""))
        elif not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            array = array.cast(pa.string())
        out.append(array.to_pylist())
    return out


def _pairs(names: list[str], values: tuple) -> list[str]:
    pairs: list[str] = []
    for name, value in zip(names, values):
        if value is not None:
            pairs += (name, value)
    return pairs


def parse_stream_id(raw: Any) -> tuple[int, int]:
    """``b'5-3'`` -> ``(5, 3)``.

    >>> parse_stream_id(b"5-3")
    (5, 3)
    """
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def last_stream_id(conn: Any, key: str) -> tuple[int, int]:
    """The stream's last generated id (kept when entries are trimmed), ``(0, 0)`` when there is none."""
    import redis

    try:
        return parse_stream_id(conn.xinfo_stream(key)["last-generated-id"])
    except redis.ResponseError as exc:
        if "no such key" in str(exc).lower():
            return 0, 0
        raise


@dataclass
class RedisConnector(Connector):
    """Writes record batches as latest-state hashes (``order_field`` set) or as stream entries."""

    server: RedisServer
    names: list[str]
    prefix: str
    entity: list[str]
    order_field: str | None = None
    stream: str | None = None
    maxlen: int | None = None
    retry_for_s: float = 120.0

    @property
    def what(self) -> str:  # type: ignore[override]
        return f"Redis at {self.server.host}:{self.server.port}/{self.server.db} {self.stream or self.prefix}"

    @property
    def secret(self) -> str | None:  # type: ignore[override]
        return self.server.password

    def connect(self) -> Any:
        return self.server.connect()

    def transient(self, error: BaseException) -> bool:
        import redis

        return isinstance(error, (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError, OSError))

    def write(self, conn: Any, batch: pa.RecordBatch, batch_id: int, first_index: int) -> None:
        rows = list(zip(*text_columns(batch)))
        if self.stream is not None:
            self._append(conn, rows, batch_id, first_index)
        else:
            self._latest(conn, rows)

    def _latest(self, conn: Any, rows: list[tuple]) -> None:
        script = conn.register_script(LATEST_SCRIPT)
        at = [self.names.index(c) for c in self.entity]
        order = self.names.index(self.order_field)
        pipe = conn.pipeline(transaction=False)
        for start in range(0, len(rows), ROWS_PER_SCRIPT):
            keys, args = [], [self.order_field]
            for row in rows[start:start + ROWS_PER_SCRIPT]:
                keys.append(":".join([self.prefix] + [row[i] or "" for i in at]))
                pairs = _pairs(self.names, row)
                args += [row[order] or "", len(pairs) // 2, *pairs]
            script(keys=keys, args=args, client=pipe)
        pipe.execute()

    def _append(self, conn: Any, rows: list[tuple], batch_id: int, first_index: int) -> None:
        ms = batch_id + 1  # stream ids must be above 0-0
        last_ms, last_seq = last_stream_id(conn, self.stream)
        if last_ms > ms:
            return  # a later batch is in already: this one is complete
        done = last_seq if last_ms == ms else -1
        pipe = conn.pipeline(transaction=False)
        for i, row in enumerate(rows, start=first_index):
            if i > done:
                pipe.xadd(self.stream, dict(zip(*[iter(_pairs(self.names, row))] * 2)) or {"empty": ""},
                          id=f"{ms}-{i}", maxlen=self.maxlen, approximate=True)
        pipe.execute()


class RedisSink(Sink):
    scheme = "redis"
    guarantee = EXACTLY_ONCE
    modes = (APPEND, UPDATE)
    writes_batches = True

    def __init__(self, uri: Uri):
        super().__init__(uri)
        self.options: RedisOptions = parse_options(RedisOptions, uri.options, "redis://")
        require("redis", "redis", "Redis")
        db = uri.path.strip("/") or "0"
        if not db.isdigit():
            raise ConfigError(f"{uri.display}: the path is the database number, e.g. redis://host:6379/0")
        self.server = RedisServer(uri.host or "localhost", uri.port or 6379, int(db), uri.username, uri.password)
        self.retry_for_s = parse_duration(self.options.retry_for, "retry_for") / 1000
        self.fresh_checkpoint = False

    @property
    def what(self) -> str:
        return f"Redis at {self.server.host}:{self.server.port}/{self.server.db}"

    def destination(self, job: str, output: str) -> tuple | None:
        s = self.server
        return ("Redis key", s.host, s.port, s.db, self.options.stream or self.options.prefix or f"{job}:{output}")

    def _client(self) -> Any:
        client = self.server.connect()
        try:
            client.ping()
        except Exception as exc:  # noqa: BLE001 — any failure to connect is reported the same way
            raise SinkError(f"cannot reach {self.what}: {one_line(exc, self.server.password)}; "
                            "start the server or fix the URI") from None
        return client

    def check(self, output_name: str, fresh_checkpoint: bool) -> None:
        self.fresh_checkpoint = fresh_checkpoint
        self._client().close()

    def prepare(self, schema: T.StructType, target: Target) -> BatchFunction:
        """Choose the layout for this output and give the ``foreachBatch`` function that writes it.

        >>> write = sink.prepare(df.schema, Target("fleet", "alerts", "q", key=("event_id",)))  # doctest: +SKIP
        """
        names = [f.name for f in schema.fields]
        missing = [k for k in target.key if k not in names]
        if missing:
            raise SinkError(f"output {target.output!r} has no column {missing[0]!r} of its key")
        prefix = self.options.prefix or f"{target.job}:{target.output}"
        times = [k for k in target.key if isinstance(schema[k].dataType, (T.TimestampType, T.TimestampNTZType))]
        entity = [k for k in target.key if k not in times]
        common = dict(server=self.server, names=names, prefix=prefix, entity=entity, retry_for_s=self.retry_for_s)
        if times and self.options.stream is None:
            order = "window_end" if "window_end" in times else times[-1]
            return BatchFunction(RedisConnector(**common, order_field=order))
        stream = self.options.stream or prefix
        client = self._client()
        try:
            if self.fresh_checkpoint and last_stream_id(client, stream) != (0, 0):
                raise SinkError(f"Redis stream {stream!r} already holds the output of another run: delete it "
                                f"(DEL {stream}), write to another one with ?stream=KEY, or pass that run's --state-dir")
        finally:
            client.close()
        order_by = list(target.key) or names
        # One partition in key order: entry ids follow the rows, the same on a replay.
        return BatchFunction(RedisConnector(**common, stream=stream, maxlen=self.options.maxlen),
                             prepare=lambda df: df.repartition(1).sortWithinPartitions(*order_by))

    def start(self, writer: DataStreamWriter, df: DataFrame, target: Target) -> StreamingQuery:
        return writer.foreachBatch(self.prepare(df.schema, target)).start()
