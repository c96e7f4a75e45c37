"""Publish to Redis Streams: ``redis://host:6379/0?stream=vehicles&shards=4``.

Each event becomes one entry ``{value: <json>}`` (id ``*``: Redis's clock, no trimming). With
``shards=N`` event *n* goes to ``<stream>:<n mod N>`` — round-robin, so the shards stay even and
the first N events of every run are the first ⌈(N-i)/shards⌉ entries of shard i, which is how
the source's ``--max-events`` reads exactly events 0 … N-1. One vehicle's events are spread over
all shards (order across shards is restored by event time, not by the source).

Entries go out through redis-py in one pipelined round trip per slice: an EVAL of a short Lua loop
per 1,000 entries of a key, which costs the client ~0.7 µs per entry where a pipeline of single
XADDs costs ~7 µs in redis-py. A server that refuses scripts (an ACL without ``@scripting``) gets
the plain XADD pipeline.
"""

from __future__ import annotations

from speedlayer.core.errors import SinkError
from speedlayer.core.uris import Uri
from speedlayer.producers.base import Destination, EventSlice
from speedlayer.sources.redis_location import RedisLocation
from speedlayer.sources.redis_streams import RedisStreamsOptions, parse_redis_options

#: Appends ARGV[i] as ``{value: ARGV[i]}`` to KEYS[1] with id ``*``, in order; returns the count.
XADD_LUA = "for i = 1, #ARGV do redis.call('XADD', KEYS[1], '*', 'value', ARGV[i]) end return #ARGV"
#: entries per EVAL: the server runs each for ~2 ms, other clients wait meanwhile
PER_SCRIPT = 1000


class RedisStreamsDestination(Destination):
    scheme = "redis"

    def __init__(self, uri: Uri):
        super().__init__(uri)
        self.options: RedisStreamsOptions = parse_redis_options(uri)
        self.location = RedisLocation.from_uri(uri, self.options.stream, self.options.shards)
        self._client = None
        self._scripts = True

    def describe(self) -> str:
        keys = self.location.keys
        shown = keys[0] if len(keys) == 1 else f"{keys[0]} .. {keys[-1]} (event n to shard n mod {len(keys)})"
        return f"Redis Streams {shown} at {self.location.address}/{self.location.db}"

    def check(self) -> None:
        client = self.location.reach(error=SinkError)
        try:
            for key in self.location.keys:
                kind = client.type(key)
                if kind not in ("none", "stream"):
                    raise SinkError(f"Redis key {key!r} at {self.location.address} holds a {kind}, not a stream: "
                                    "use another stream name")
        finally:
            client.close()

    def open(self) -> None:
        import redis

        self._client = self.location.data_client(error=SinkError)
        try:
            self._client.execute_command("EVAL", XADD_LUA, 0)  # adds nothing; loads the script
            self._scripts = True
        except redis.exceptions.ResponseError as exc:
            if not _scripts_refused(exc):
                self.close()
                raise self.location.failure(exc, SinkError) from None
            self._scripts = False
        except redis.exceptions.RedisError as exc:
            self.close()
            raise self.location.failure(exc, SinkError) from None

    def write(self, events: EventSlice) -> None:
        import redis

        keys = self.location.keys
        shards = len(keys)
        pipe = self._client.pipeline(transaction=False)
        if self._scripts:
            for s in range(min(shards, len(events))):  # event first+i goes to keys[(first+i) % shards]
                key, values = keys[(events.first + s) % shards], events.values[s::shards]
                for i in range(0, len(values), PER_SCRIPT):
                    pipe.execute_command("EVAL", XADD_LUA, 1, key, *values[i:i + PER_SCRIPT])
        else:
            for i, value in enumerate(events.values):
                pipe.execute_command("XADD", keys[(events.first + i) % shards], "*", "value", value)
        try:
            replies = pipe.execute(raise_on_error=False)
        except redis.exceptions.RedisError as exc:
            raise self.location.failure(exc, SinkError) from None
        refused = next((reply for reply in replies if isinstance(reply, Exception)), None)
        if refused is not None:  # the other entries were still added
            reason = str(refused).split(" script: ")[0]  # an error inside the script names the script
            raise SinkError(f"Redis at {self.location.address} refused an entry: {reason}")

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _scripts_refused(exc: Exception) -> bool:
    """Whether EVAL itself is refused (ACL, a proxy without scripting), so plain XADD must do."""
    import redis

    return isinstance(exc, redis.exceptions.NoPermissionError) or "unknown command" in str(exc).lower()
