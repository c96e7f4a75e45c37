"""Publish to Redis Streams: ``redis://host:6379/0?stream=vehicles&shards=4``.

Each event becomes one entry ``{value: <json>}`` (id ``*``: Redis's clock, no trimming). With
``shards=N`` event *n* goes to ``<stream>:<n mod N>`` — round-robin, so the shards stay even and
the first N events of every run are the first ⌈(N-i)/shards⌉ entries of shard i, which is how
the source's ``--max-events`` reads exactly events 0 … N-1. One vehicle's events are spread over
all shards (order across shards is restored by event time, not by the source).
"""

from __future__ import annotations

from speedlayer.errors import SinkError
from speedlayer.producers.base import Destination, EventSlice
from speedlayer.sources.redis_location import RedisLocation
from speedlayer.sources.redis_streams import RedisStreamsOptions, parse_redis_options
from speedlayer.uris import Uri


class RedisStreamsDestination(Destination):
    scheme = "redis"

    def __init__(self, uri: Uri):
        super().__init__(uri)
        self.options: RedisStreamsOptions = parse_redis_options(uri)
        self.location = RedisLocation.from_uri(uri, self.options.stream, self.options.shards)
        self._wire = None

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
        from speedlayer.redis_wire import WireError

        try:
            self._wire = self.location.wire().connect()
        except WireError as exc:
            raise SinkError(f"{exc}; start redis-server or fix the URI") from None

    def write(self, events: EventSlice) -> None:
        from speedlayer.redis_wire import WireError

        keys = self.location.keys
        shards = len(keys)
        targets = [keys[(events.first + i) % shards] for i in range(len(events))] if shards > 1 else [keys[0]] * len(events)
        try:
            self._wire.xadd_many(targets, events.values)
        except WireError as exc:
            raise SinkError(f"Redis at {self.location.address} refused an entry: {exc}") from None

    def close(self) -> None:
        if self._wire is not None:
            self._wire.close()
            self._wire = None
