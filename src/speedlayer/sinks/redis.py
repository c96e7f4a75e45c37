"""``redis://[user:password@]host:6379/DB?prefix=fleet`` — latest state as hashes, events as a stream.

Two layouts, chosen by the output's key:

- **Latest state per entity** (outputs keyed by a time window, e.g. ``windows``): one hash per
  entity, ``<prefix>:<vehicle_id>``, holding the fields of that entity's most recent window. A Lua
  script replaces the hash only when the new row's ``window_end`` is at least the stored one, so a
  replayed or late batch can never move a vehicle back to an older window.
- **Event stream** (outputs keyed by an id, e.g. ``alerts``, ``dead-letters``; or any output with
  ``stream=KEY``): entries appended to one stream, ids given by Redis (``XADD *``), rows ordered by
  the key within the batch. A Lua script appends up to 500 rows at a time and, in the same atomic
  step, records in the hash ``<stream>:committed`` (field ``<job>:<output>``) the batch id and how
  many of its rows are in (``7:1200``). A replay skips the rows the hash counts, so a batch that
  failed half-way is completed, a finished one adds nothing, and a call that would leave a gap is
  refused. The stream may be shared: other writers' entries (``XADD *`` by anyone) and other
  outputs' rows interleave with ours without hiding any batch.

Why exactly once: both writes are idempotent for a batch Spark replays (same batch id, same rows
in the same order), and Spark replays an unfinished batch after a restart from the checkpoint.
The hash ties the stream to this output's checkpoint: a new run (fresh checkpoint) of the same
job and output into a stream that another run wrote is refused.

Values are text: numbers as Spark prints them, timestamps as ISO-8601 UTC
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
from pyspark.sql import types as T

from speedlayer.core.durations import parse_duration
from speedlayer.core.errors import ConfigError, SinkError
from speedlayer.core.modes import APPEND, UPDATE
from speedlayer.core.uris import Uri, parse_options
from speedlayer.sinks.base import EXACTLY_ONCE, Sink, Target
from speedlayer.sinks.batches import BatchFunction, Connector, RetryOptions, one_line, require

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

#: KEYS: the stream, the hash of committed batches. ARGV: the writer's field in that hash, the batch id,
#: the index of this call's first row in the batch, maxlen ('' for none), then per row: the number of
#: field/value pairs and the pairs. Rows the hash counts as written are skipped; a gap is refused.
STREAM_SCRIPT = """
local mark = redis.call('HGET', KEYS[2], ARGV[1])
local batch, row = tonumber(ARGV[2]), tonumber(ARGV[3])
local done = 0
if mark then
  local b, r = string.match(mark, '^(%d+):(%d+)$')
  if tonumber(b) > batch then return 0 end
  if tonumber(b) == batch then done = tonumber(r) end
end
if row > done then
  return redis.error_reply('rows ' .. done .. ' to ' .. (row - 1) .. ' of batch ' .. batch .. ' are missing: not written')
end
local pos, written = 5, 0
while pos <= #ARGV do
  local n = tonumber(ARGV[pos])
  if row >= done then
    local cmd = {'XADD', KEYS[1]}
    if ARGV[4] ~= '' then cmd[#cmd + 1] = 'MAXLEN'; cmd[#cmd + 1] = '~'; cmd[#cmd + 1] = ARGV[4] end
    cmd[#cmd + 1] = '*'
    for i = pos + 1, pos + 2 * n do cmd[#cmd + 1] = ARGV[i] end
    redis.call(unpack(cmd))
    written = written + 1
  end
  row = row + 1
  pos = pos + 1 + 2 * n
end
if row > done then redis.call('HSET', KEYS[2], ARGV[1], batch .. ':' .. row) end
return written
"""


def committed_key(stream: str) -> str:
    """The hash that records, per writing output, the last batch appended to ``stream`` and its rows.

    >>> committed_key("fleet:alerts")
    'fleet:alerts:committed'
    """
    return f"{stream}:committed"


def rows_in(conn: Any, committed: str, writer: str, batch_id: int) -> int:
    """How many rows of batch ``batch_id`` the committed hash counts as appended (all: a later batch is in)."""
    mark = conn.hget(committed, writer)
    if not mark:
        return 0
    batch, _, rows = (mark.decode() if isinstance(mark, bytes) else str(mark)).partition(":")
    if int(batch) == batch_id:
        return int(rows)
    return 2**62 if int(batch) > batch_id else 0


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


@dataclass
class RedisConnector(Connector):
    """Writes record batches as latest-state hashes (``order_field`` set) or as stream entries."""

    server: RedisServer
    names: list[str]
    prefix: str
    entity: list[str]
    order_field: str | None = None
    stream: str | None = None
    #: this output's field in the stream's committed hash (``<job>:<output>``)
    writer: str = ""
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
        assert self.stream is not None
        script = conn.register_script(STREAM_SCRIPT)
        keys = [self.stream, committed_key(self.stream)]
        # Not sending what is in already (a replay); the script checks again, atomically.
        skip = min(max(rows_in(conn, keys[1], self.writer, batch_id) - first_index, 0), len(rows))
        pipe = conn.pipeline(transaction=False)
        for start in range(skip, len(rows), ROWS_PER_SCRIPT):
            args: list = [self.writer, batch_id, first_index + start, self.maxlen or ""]
            for row in rows[start:start + ROWS_PER_SCRIPT]:
                pairs = _pairs(self.names, row) or ["empty", ""]
                args += [len(pairs) // 2, *pairs]
            script(keys=keys, args=args, client=pipe)
        pipe.execute()


class RedisSink(Sink):
    scheme = "redis"
    summary = "Redis hashes (latest row per key) or a Redis stream, idempotent per batch"
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
        self._client().close()

    def batch_function(self, schema: T.StructType, target: Target) -> BatchFunction:
        """Choose the layout for this output and give the ``foreachBatch`` function that writes it.

        >>> write = sink.batch_function(df.schema, Target("fleet", "alerts", "q", key=("event_id",)))  # doctest: +SKIP
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
        stream, writer = self.options.stream or prefix, f"{target.job}:{target.output}"
        client = self._client()
        try:
            if target.fresh_checkpoint and client.hexists(committed_key(stream), writer):
                raise SinkError(f"Redis stream {stream!r} already holds the output of another run of {writer}: write to "
                                f"another one with ?stream=KEY, pass that run's --state-dir, or forget that run with "
                                f"HDEL {committed_key(stream)} {writer} (and DEL {stream} if its entries must go too)")
        finally:
            client.close()
        # One partition, in key order with every other sortable column breaking ties: a replay
        # sees the rows in the same order, so the rows the committed hash counts are the same ones.
        ties = [f.name for f in schema.fields if f.name not in target.key and not isinstance(f.dataType, T.MapType)]
        order_by = list(target.key) + ties
        return BatchFunction(RedisConnector(**common, stream=stream, writer=writer, maxlen=self.options.maxlen),
                             prepare=lambda df: df.repartition(1).sortWithinPartitions(*order_by))
