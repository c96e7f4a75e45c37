"""``kafka://host:port[,host:port]/topic`` — a Kafka topic written exactly once, and Spark's own sink.

Each row becomes one record: the value is the row as JSON, the key is the output's natural key
(``event_id`` for alerts, ``{"window_start":...,"window_end":...,"vehicle_id":...}`` as JSON for
windows, the source offset for dead letters), partitioned as Kafka's Java clients do (murmur2).

- ``kafka://`` writes each micro-batch in one Kafka transaction that also records the batch id
  (kafka_transactions.py): consumers reading with ``isolation.level=read_committed`` see every
  row once, through crashes and restarts. Micro-batch triggers only.
- ``spark-kafka://`` is Spark's own Kafka sink: at-least-once (a batch replayed after a crash is
  written again), a JVM sink, so the one that takes continuous and real-time output.

``kafka.``-prefixed settings go to the producer as given: librdkafka's names for ``kafka://``
(``kafka.compression.type``, ``kafka.security.protocol``, ``kafka.sasl.*``...), the Java client's for
``spark-kafka://``; secrets are masked when printed. ``kafka://`` also takes ``retry_for`` (120s): how
long a batch waits for a lost broker before the query fails.

    --sink alerts='kafka://localhost:9092/fleet-alerts?kafka.compression.type=lz4'

Spark's connector (``spark-sql-kafka-0-10``) is not part of PySpark: a run adds it to its session
by itself (``speedlayer.sources.kafka_connector``).
"""

from __future__ import annotations

import re
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery
from pyspark.sql.types import StructType

from speedlayer.core.durations import parse_duration
from speedlayer.core.errors import ConfigError, SinkError
from speedlayer.core.modes import APPEND, COMPLETE, UPDATE
from speedlayer.core.uris import Uri, parse_options
from speedlayer.sinks.base import AT_LEAST_ONCE, EXACTLY_ONCE, Sink, Target
from speedlayer.sinks.batches import RetryOptions
from speedlayer.sinks.kafka_transactions import Transactions, last_batch, marker_group
from speedlayer.sinks.rejects import RejectStore
from speedlayer.sources.kafka import check_brokers, is_secret, kafka_client, parse_brokers
from speedlayer.sources.kafka_connector import DATA_SOURCE, check_connector, connector_package

_TOPIC = re.compile(r"^[A-Za-z0-9._-]+$")
#: Kafka producer settings the sinks refuse or set themselves, and what to do instead
_REFUSED = {
    "kafka.bootstrap.servers": "give the brokers in the URI: kafka://host1:9092,host2:9092/topic",
    "kafka.key.serializer": "keys are written as UTF-8 text",
    "kafka.value.serializer": "values are written as JSON text",
    "kafka.transactional.id": "kafka:// names its transactions after the job, output and topic",
    "kafka.enable.idempotence": "kafka:// writes in transactions, which need idempotence",
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


def kafka_records(df: DataFrame, key: tuple[str, ...]) -> DataFrame:
    """The (key, value) records written for the rows of ``df``: the key as ``record_key`` says, the row as JSON."""
    return df.select(record_key(df, key), F.to_json(F.struct(*df.columns)).alias("value"))


class KafkaTopicSink(Sink):
    """What both Kafka sinks share: brokers and one topic in the URI, ``kafka.<setting>`` options for the producer."""

    #: options of the sink itself, beside the producer's kafka.<setting> ones
    own_options: tuple[str, ...] = ()

    def __init__(self, uri: Uri):
        super().__init__(uri)
        self.brokers = parse_brokers(uri)
        self.topic = uri.path.strip("/")
        if not _TOPIC.match(self.topic):
            raise ConfigError(f"{uri.display}: name one topic after the brokers, e.g. {self.scheme}://localhost:9092/"
                              "fleet-alerts (letters, digits, '.', '_', '-')")
        for option in uri.options:
            if option in self.own_options:
                continue
            if not option.startswith("kafka."):
                takes = "".join(f"{o}, " for o in self.own_options)
                raise ConfigError(f"{self.scheme}: sink has no option {option!r}; it takes {takes}kafka.<producer "
                                  "setting> options only")
            if option in _REFUSED:
                raise ConfigError(f"{self.scheme}: sink option {option!r} cannot be set: {_REFUSED[option]}")
        self.client_options = {k: v for k, v in uri.options.items() if k not in self.own_options}

    def describe(self) -> str:
        settings = [f"{k}={'***' if is_secret(k) else v}" for k, v in sorted(self.client_options.items())]
        return f"kafka {','.join(self.brokers)} topic {self.topic}" + (f" ({', '.join(settings)})" if settings else "")

    def destination(self, job: str, output: str) -> tuple | None:
        return ("kafka", tuple(sorted(self.brokers)), self.topic)

    def check(self, output_name: str, fresh_checkpoint: bool) -> None:
        check_brokers(self.brokers, SinkError)


class SparkKafkaSink(KafkaTopicSink):
    """``spark-kafka://host:port[,host:port]/topic?kafka.<producer setting>=...``: Spark's own Kafka sink."""

    scheme = "spark-kafka"
    summary = "a Kafka topic through Spark's own sink, one JSON message per row"
    guarantee = AT_LEAST_ONCE
    modes = (APPEND, UPDATE, COMPLETE)
    supports_continuous = True
    supports_realtime = True

    def spark_packages(self) -> list[str]:
        return [connector_package()]

    def check_session(self, spark: SparkSession) -> None:
        check_connector(spark)

    def spark_options(self) -> dict[str, str]:
        """Every option given to Spark's Kafka writer (secrets included: never print this)."""
        return {"kafka.bootstrap.servers": ",".join(self.brokers), "topic": self.topic, **self.client_options}

    def records(self, df: DataFrame, target: Target) -> DataFrame:
        return kafka_records(df, target.key)

    def start(self, writer: DataStreamWriter, df: DataFrame, target: Target) -> StreamingQuery:
        return writer.format(DATA_SOURCE).options(**self.spark_options()).start()


class KafkaSink(KafkaTopicSink):
    """``kafka://host:port[,host:port]/topic?kafka.<librdkafka setting>=...``: exactly once, by Kafka transactions.

    Rows are made into records per batch and written from the driver by confluent-kafka: Spark's
    connector is not needed.
    """

    scheme = "kafka"
    summary = "a Kafka topic, one JSON message per row, one transaction per micro-batch"
    guarantee = EXACTLY_ONCE
    modes = (APPEND, UPDATE, COMPLETE)
    writes_batches = True
    #: what to use where it cannot run (continuous and real-time modes)
    instead = "spark-kafka:// (Spark's own Kafka sink, at-least-once)"
    own_options = ("retry_for",)

    def __init__(self, uri: Uri):
        super().__init__(uri)
        kafka_client()  # the ImportError names the extra now, not at the first batch
        self.settings = {k.removeprefix("kafka."): v for k, v in self.client_options.items()}
        retry = parse_options(RetryOptions, {k: v for k, v in uri.options.items() if k in self.own_options}, "kafka://")
        self.retry_for_s = parse_duration(retry.retry_for, "retry_for") / 1000

    def batch_function(self, schema: StructType, target: Target) -> Transactions:
        group = marker_group(target.job, target.output, self.topic)
        transactions = Transactions(",".join(self.brokers), self.topic, group, self.settings, self.retry_for_s,
                                    output=target.output,
                                    store=RejectStore(Path(target.rejected), target.output) if target.rejected else None)
        if target.fresh_checkpoint:
            self._refuse_another_runs_topic(group)
        return _Records(target, transactions)

    def _refuse_another_runs_topic(self, group: str) -> None:
        """A fresh checkpoint counts batches from 0 again: into a topic whose batches another run committed,
        every one of them would be taken for a replay and skipped."""
        kafka = kafka_client()
        try:
            batch, _ = last_batch(",".join(self.brokers), self.topic, group, self.settings)
        except kafka.KafkaException as exc:
            raise SinkError(f"cannot reach Kafka at {','.join(self.brokers)}: {exc.args[0].str()}; "
                            "start the broker or fix the URI") from None
        if batch >= 0:
            raise SinkError(f"Kafka topic {self.topic!r} already holds batches of another run of this output "
                            f"(consumer group {group!r}, batch {batch}): write to another topic, pass that "
                            f"run's --state-dir, or forget that run with kafka-consumer-groups --delete --group {group}")


class _Records:
    """The ``foreachBatch`` function: the rows as (key, value) records, then one transaction."""

    def __init__(self, target: Target, transactions: Transactions):
        self.target, self.transactions = target, transactions

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        self.transactions(kafka_records(batch_df, self.target.key), batch_id)
