"""``kafka://host:port[,host:port]/topic`` — Spark's own Kafka sink, at-least-once.

Each row becomes one record: the value is the row as JSON, the key is the output's natural key
(``event_id`` for alerts, ``{"window_start":...,"window_end":...,"vehicle_id":...}`` as JSON for
windows, the source offset for dead letters). Spark's Kafka sink is at-least-once: a batch replayed
after a crash is written again, so consumers deduplicate on the key (or use a compacted topic,
which keeps the last record per key — in update mode, the latest value of each window).

``kafka.``-prefixed settings go to Spark's Kafka producer as given (``kafka.security.protocol``,
``kafka.sasl.*``, ``kafka.ssl.*``, ``kafka.compression.type``...); secrets are masked when printed.
It is a JVM sink, so it takes micro-batch, continuous and real-time output alike.

    --sink alerts='kafka://localhost:9092/fleet-alerts?kafka.compression.type=lz4'

The connector (``spark-sql-kafka-0-10``) is not part of PySpark: the run fails before any query
starts, saying what to add, when the session lacks it.
"""

from __future__ import annotations

import re

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from speedlayer.core.errors import ConfigError, SinkError
from speedlayer.core.modes import APPEND, COMPLETE, UPDATE
from speedlayer.core.uris import Uri
from speedlayer.sinks.base import AT_LEAST_ONCE, Sink, Target
from speedlayer.sources.kafka import DATA_SOURCE, check_brokers, check_connector, is_secret, parse_brokers

_TOPIC = re.compile(r"^[A-Za-z0-9._-]+$")
#: Kafka producer settings Spark's sink refuses or sets itself, and what to do instead
_REFUSED = {
    "kafka.bootstrap.servers": "give the brokers in the URI: kafka://host1:9092,host2:9092/topic",
    "kafka.key.serializer": "keys are written as UTF-8 text",
    "kafka.value.serializer": "values are written as JSON text",
}


def record_key(df: DataFrame, key: tuple[str, ...]) -> Column:
    """The record key of an output row: its one key column as text, several as a JSON object.

    >>> record_key(alerts_df, ("event_id",))  # doctest: +SKIP
    Column<'CAST(event_id AS STRING) AS key'>
    """
    present = [c for c in key if c in df.columns]
    if not present:
        return F.lit(None).cast("string").alias("key")
    if len(present) == 1:
        return F.col(present[0]).cast("string").alias("key")
    return F.to_json(F.struct(*present)).alias("key")


class KafkaSink(Sink):
    """``kafka://host:port[,host:port]/topic?kafka.<producer setting>=...``."""

    scheme = "kafka"
    summary = "a Kafka topic, one JSON message per row"
    guarantee = AT_LEAST_ONCE
    modes = (APPEND, UPDATE, COMPLETE)
    supports_continuous = True

    def __init__(self, uri: Uri):
        super().__init__(uri)
        self.brokers = parse_brokers(uri)
        self.topic = uri.path.strip("/")
        if not _TOPIC.match(self.topic):
            raise ConfigError(f"{uri.display}: name one topic after the brokers, e.g. kafka://localhost:9092/fleet-alerts "
                              "(letters, digits, '.', '_', '-')")
        for option in uri.options:
            if not option.startswith("kafka."):
                raise ConfigError(f"kafka: sink has no option {option!r}; it takes kafka.<producer setting> options only")
            if option in _REFUSED:
                raise ConfigError(f"kafka: sink option {option!r} cannot be set: {_REFUSED[option]}")
        self.client_options = dict(uri.options)

    def describe(self) -> str:
        settings = [f"{k}={'***' if is_secret(k) else v}" for k, v in sorted(self.client_options.items())]
        return f"kafka {','.join(self.brokers)} topic {self.topic}" + (f" ({', '.join(settings)})" if settings else "")

    def destination(self, job: str, output: str) -> tuple | None:
        return ("kafka", tuple(sorted(self.brokers)), self.topic)

    def check(self, output_name: str, fresh_checkpoint: bool) -> None:
        check_brokers(self.brokers, SinkError)

    def check_session(self, spark: SparkSession) -> None:
        check_connector(spark)

    def spark_options(self) -> dict[str, str]:
        """Every option given to Spark's Kafka writer (secrets included: never print this)."""
        return {"kafka.bootstrap.servers": ",".join(self.brokers), "topic": self.topic, **self.client_options}

    def records(self, df: DataFrame, target: Target) -> DataFrame:
        """The (key, value) records Spark's Kafka sink writes for the rows of ``df``."""
        return df.select(record_key(df, target.key), F.to_json(F.struct(*df.columns)).alias("value"))

    def start(self, writer: DataStreamWriter, df: DataFrame, target: Target) -> StreamingQuery:
        return writer.format(DATA_SOURCE).options(**self.spark_options()).start()
