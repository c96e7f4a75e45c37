"""The sink registry: ``open_sink("parquet:out/windows")`` gives a Sink for that URI."""

from __future__ import annotations

from speedlayer.errors import ConfigError
from speedlayer.sinks.base import Sink
from speedlayer.sinks.console import ConsoleSink
from speedlayer.sinks.memory import MemorySink
from speedlayer.sinks.parquet import ParquetSink
from speedlayer.uris import parse_uri

SINKS: dict[str, type[Sink]] = {cls.scheme: cls for cls in (ConsoleSink, ParquetSink, MemorySink)}
EXAMPLES = "console:, parquet:out/windows, parquet:///abs/dir, memory:table"


def open_sink(text: str) -> Sink:
    """The Sink for a URI; an unknown scheme lists the known ones.

    >>> open_sink("parquet:out/windows").guarantee
    'exactly-once'
    """
    uri = parse_uri(text, "sink URI")
    cls = SINKS.get(uri.scheme)
    if cls is None:
        raise ConfigError(f"unknown sink scheme {uri.scheme!r} in {uri.display!r}: use one of {EXAMPLES}")
    return cls(uri)
