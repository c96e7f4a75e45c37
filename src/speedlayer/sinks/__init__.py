"""The sink registry: ``open_sink("parquet:out/windows")`` gives a Sink for that URI.

Sinks are found by URI scheme among the entry points of group ``speedlayer.sinks`` (the
entry-point name is the scheme; an alias is one more entry point); speedlayer declares its own
there like any plug-in.
"""

from __future__ import annotations

from speedlayer.core import plugins
from speedlayer.core.uris import class_by_scheme
from speedlayer.sinks.base import Sink

#: speedlayer's own sinks, as its pyproject.toml declares them (used when its metadata is missing)
BUILTIN_SINKS = {
    "console": "speedlayer.sinks.console:ConsoleSink",
    "parquet": "speedlayer.sinks.parquet:ParquetSink",
    "memory": "speedlayer.sinks.memory:MemorySink",
    "postgresql": "speedlayer.sinks.postgres:PostgresSink",
    "postgres": "speedlayer.sinks.postgres:PostgresSink",
    "mysql": "speedlayer.sinks.mysql:MySqlSink",
    "mariadb": "speedlayer.sinks.mysql:MySqlSink",
    "redis": "speedlayer.sinks.redis:RedisSink",
    "kafka": "speedlayer.sinks.kafka:KafkaSink",
    "spark-kafka": "speedlayer.sinks.kafka:SparkKafkaSink",
    "delta": "speedlayer.sinks.delta:DeltaSink",
}
EXAMPLES = ("console:, parquet:out/windows, parquet:///abs/dir, delta:out/alerts, memory:table, "
            "postgresql://user:pass@host:5432/db?table=NAME, mysql://user:pass@host:3306/db?table=NAME, "
            "redis://host:6379/0?prefix=fleet, kafka://host:9092/topic, spark-kafka://host:9092/topic")


def sink_registry() -> plugins.Registry:
    """Every registered sink class by scheme, and the plug-ins that could not be used."""
    return plugins.registry("sink", BUILTIN_SINKS, lambda name, value: plugins.check_subclass(name, value, Sink, "sink"))


def sinks() -> dict[str, type[Sink]]:
    """Scheme -> Sink class of every registered sink."""
    return sink_registry().values()


def open_sink(text: str) -> Sink:
    """The Sink for a URI; an unknown scheme lists the known ones.

    >>> open_sink("parquet:out/windows").guarantee
    'exactly-once'
    """
    found = sink_registry()
    plugins.report(found)
    others = [f"{scheme}:" for scheme, entry in found.entries.items() if not entry.builtin]
    cls, uri = class_by_scheme(found.values(), text, "sink URI", ", ".join([EXAMPLES, *others]))
    return cls(uri)
