"""The sink registry: ``open_sink("parquet:out/windows")`` gives a Sink for that URI."""

from __future__ import annotations

from speedlayer.core.uris import open_by_scheme
from speedlayer.sinks.base import Sink
from speedlayer.sinks.console import ConsoleSink
from speedlayer.sinks.kafka import KafkaSink
from speedlayer.sinks.memory import MemorySink
from speedlayer.sinks.mysql import MySqlSink
from speedlayer.sinks.parquet import ParquetSink
from speedlayer.sinks.postgres import PostgresSink
from speedlayer.sinks.redis import RedisSink

_ALL: tuple[type[Sink], ...] = (ConsoleSink, ParquetSink, MemorySink, PostgresSink, MySqlSink, RedisSink, KafkaSink)
SINKS: dict[str, type[Sink]] = {
    name: cls for cls in _ALL for name in (cls.scheme, *getattr(cls, "aliases", ()))
}
EXAMPLES = ("console:, parquet:out/windows, parquet:///abs/dir, memory:table, "
            "postgresql://user:pass@host:5432/db?table=NAME, mysql://user:pass@host:3306/db?table=NAME, "
            "redis://host:6379/0?prefix=fleet, kafka://host:9092/topic")


def open_sink(text: str) -> Sink:
    """The Sink for a URI; an unknown scheme lists the known ones.

    >>> open_sink("parquet:out/windows").guarantee
    'exactly-once'
    """
    return open_by_scheme(SINKS, text, "sink URI", EXAMPLES)
