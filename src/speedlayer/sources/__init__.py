"""The source registry: ``open_source("generator://?rate=1000")`` gives a Source for that URI."""

from __future__ import annotations

from speedlayer.core.uris import open_by_scheme
from speedlayer.sources.base import Source
from speedlayer.sources.files import FilesSource
from speedlayer.sources.generator import GeneratorSource
from speedlayer.sources.kafka import KafkaSource
from speedlayer.sources.redis_streams import RedisStreamsSource
from speedlayer.sources.socket import SocketSource

SOURCES: dict[str, type[Source]] = {cls.scheme: cls for cls in (GeneratorSource, FilesSource, RedisStreamsSource,
                                                               SocketSource, KafkaSource)}
EXAMPLES = ("generator://?rate=1000, files:///landing?format=json, redis://localhost:6379/0?stream=vehicles&shards=4, "
            "socket://localhost:9999, kafka://localhost:9092/telemetry")


def open_source(text: str) -> Source:
    """The Source for a URI; an unknown scheme lists the known ones.

    >>> open_source("generator://?seed=7").options.seed
    7
    """
    return open_by_scheme(SOURCES, text, "source URI", EXAMPLES)
