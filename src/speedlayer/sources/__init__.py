"""The source registry: ``open_source("generator://?rate=1000")`` gives a Source for that URI.

Sources are found by URI scheme among the entry points of group ``speedlayer.sources`` (the
entry-point name is the scheme); speedlayer declares its own there like any plug-in.
"""

from __future__ import annotations

from speedlayer.core import plugins
from speedlayer.core.uris import class_by_scheme
from speedlayer.sources.base import Source

#: speedlayer's own sources, as its pyproject.toml declares them (used when its metadata is missing)
BUILTIN_SOURCES = {
    "generator": "speedlayer.sources.generator:GeneratorSource",
    "files": "speedlayer.sources.files:FilesSource",
    "redis": "speedlayer.sources.redis_streams:RedisStreamsSource",
    "socket": "speedlayer.sources.socket:SocketSource",
    "kafka": "speedlayer.sources.kafka:KafkaSource",
}
EXAMPLES = ("generator://?rate=1000, files:///landing?format=json, redis://localhost:6379/0?stream=vehicles&shards=4, "
            "socket://localhost:9999, kafka://localhost:9092/telemetry")


def source_registry() -> plugins.Registry:
    """Every registered source class by scheme, and the plug-ins that could not be used."""
    return plugins.registry("source", BUILTIN_SOURCES, lambda name, value: plugins.check_subclass(name, value, Source, "source"))


def sources() -> dict[str, type[Source]]:
    """Scheme -> Source class of every registered source."""
    return source_registry().values()


def open_source(text: str) -> Source:
    """The Source for a URI; an unknown scheme lists the known ones.

    >>> open_source("generator://?seed=7").options.seed
    7
    """
    found = source_registry()
    plugins.report(found)
    others = [f"{scheme}://" for scheme, entry in found.entries.items() if not entry.builtin]
    cls, uri = class_by_scheme(found.values(), text, "source URI", ", ".join([EXAMPLES, *others]))
    return cls(uri)
