"""Destinations of ``speedlayer produce``: ``open_destination("redis://...")`` gives one for a URI."""

from __future__ import annotations

from speedlayer.core.uris import class_by_scheme
from speedlayer.producers.base import Destination, EventSlice
from speedlayer.producers.files import FilesDestination
from speedlayer.producers.kafka import KafkaDestination
from speedlayer.producers.redis_streams import RedisStreamsDestination

DESTINATIONS: dict[str, type[Destination]] = {
    cls.scheme: cls for cls in (RedisStreamsDestination, FilesDestination, KafkaDestination)
}
EXAMPLES = "redis://localhost:6379/0?stream=vehicles&shards=4, files:///landing, kafka://localhost:9092/vehicles"

__all__ = ["Destination", "EventSlice", "DESTINATIONS", "open_destination"]


def open_destination(text: str) -> Destination:
    """The Destination for a ``--to`` URI; an unknown scheme lists the known ones.

    >>> open_destination("files:///tmp/landing").describe()
    'files:/tmp/landing (JSON lines)'
    """
    cls, uri = class_by_scheme(DESTINATIONS, text, "--to URI", EXAMPLES, unknown="cannot produce to {scheme}:// ({display})")
    return cls(uri)
