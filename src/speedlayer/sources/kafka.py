"""``kafka://host:port[,host2:port]/topic`` — a Kafka topic read with Spark's own connector.

``value`` and ``key`` are the record's bytes as UTF-8 text, ``offset`` is ``partition/offset``
(``topic/partition/offset`` when several comma-separated topics are read), ``ingest_time`` the
record's Kafka timestamp. Offsets live in the checkpoint, so a restart replays exactly what a
failed batch read. The only source Spark's real-time mode (``--trigger realtime``) reads.

Options (Spark's names; the snake_case spellings work too): ``startingOffsets`` (``latest``, the
default, ``earliest`` or Spark's JSON per partition), ``failOnDataLoss`` (true), ``maxOffsetsPerTrigger``,
and every ``kafka.``-prefixed Kafka client setting (``kafka.security.protocol``, ``kafka.sasl.*``,
``kafka.ssl.*``...), passed through as given; secrets are masked when printed.

    kafka://broker1:9092,broker2:9092/telemetry?startingOffsets=earliest&kafka.security.protocol=SASL_SSL

Spark's connector (``spark-sql-kafka-0-10``) is not part of PySpark: a run adds it to its session
by itself (``speedlayer.sources.kafka_connector``).
"""

from __future__ import annotations

import logging
import re
import socket
from contextlib import closing
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, field_validator
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from speedlayer.core.errors import ConfigError, SourceError
from speedlayer.core.uris import Uri, is_secret_option, parse_options
from speedlayer.sources.base import Source, end_offsets, offsets_behind, snake_case_options
from speedlayer.sources.kafka_connector import DATA_SOURCE, check_connector, connector_package

DEFAULT_PORT = 9092
CONNECT_TIMEOUT_S = 3.0
#: Kafka client settings Spark's source refuses, and what to use instead
_REFUSED = {
    "kafka.bootstrap.servers": "give the brokers in the URI: kafka://host1:9092,host2:9092/topic",
    "kafka.auto.offset.reset": "use startingOffsets=earliest or latest",
    "kafka.key.deserializer": "keys are read as bytes and cast to text",
    "kafka.value.deserializer": "values are read as bytes and cast to text",
    "kafka.enable.auto.commit": "offsets are kept in the checkpoint, not committed to Kafka",
    "kafka.interceptor.classes": "Spark's Kafka source does not support interceptors",
}
_TOPIC = re.compile(r"^[A-Za-z0-9._-]+$")
log = logging.getLogger("speedlayer.sources")


_OFFSET_WENT_BACK = re.compile(r"Partition (\S+)-(\d+) offset was changed from (\d+) to (\d+)")
_UNREADABLE = re.compile(r"Could not read records in offset \[(\d+), (\d+)\) for topic partition (\S+)-(\d+)")
_DELETED = re.compile(r"Partitions (?:Set\()?([^()]*?)\)? have been deleted")
_CLIENT_TIMEOUT = re.compile(r"org\.apache\.kafka\.common\.errors\.TimeoutException: ([^\n]*)")
_CONFIG_REFUSED = re.compile(r"org\.apache\.kafka\.common\.config\.ConfigException: ([^\n]*)")
_ACCEPT = ("to accept the loss and read on, add failOnDataLoss=false to the kafka:// URI and run again with "
           "--allow-changed-settings")


def data_loss(text: str) -> str | None:
    """Spark's report of records lost before they were read, as one line naming topic, partition and offsets.

    >>> line = data_loss("Some data may have been lost ... Reason: Partition fastcars-0 offset was changed from 40 to 5.")
    >>> line.split(":")[0], "failOnDataLoss=false" in line
    ('Kafka topic fastcars partition 0 now ends at offset 5, before offset 40 this run had read up to', True)
    >>> data_loss("... Reason: Partitions Set(fast-cars-1, fast-cars-0) have been deleted.").split(":")[0]
    'Kafka topic fast-cars partitions 0, 1 were deleted while this run was reading them'
    """
    went_back = _OFFSET_WENT_BACK.search(text)
    if went_back:
        topic, partition, read, now = went_back.groups()
        return (f"Kafka topic {topic} partition {partition} now ends at offset {now}, before offset {read} this run had "
                f"read up to: the topic was deleted and recreated, and what it held from {now} on was never read; {_ACCEPT}")
    unreadable = _UNREADABLE.search(text)
    if unreadable:
        start, end, topic, partition = unreadable.groups()
        return (f"Kafka topic {topic} partition {partition}: records at offsets {start} to {int(end) - 1} were deleted "
                f"before this run read them (retention, or the topic was recreated); {_ACCEPT}")
    deleted = _DELETED.search(text)
    if deleted:
        by_topic: dict[str, list[int]] = {}
        for name in deleted.group(1).split(","):
            topic, _, partition = name.strip().rpartition("-")
            by_topic.setdefault(topic, []).append(int(partition))
        where = "; ".join(f"Kafka topic {t} partition{'s' if len(ps) > 1 else ''} {', '.join(map(str, sorted(ps)))}"
                          for t, ps in by_topic.items())
        many = sum(map(len, by_topic.values())) > 1
        return (f"{where} {'were' if many else 'was'} deleted while this run was reading {'them' if many else 'it'}: "
                f"records not read by then are lost; {_ACCEPT}")
    return None


def lost_brokers(text: str, brokers: list[str]) -> str | None:
    """Spark's Kafka reader giving up on brokers it cannot reach (its client's timeouts, retried
    ``fetchOffset.numRetries`` times), as one line.

    >>> lost_brokers("org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node assignment. "
    ...              "Call: listNodes", ["k1:9092"]).split(";")[0]
    "lost Kafka at k1:9092: Spark's Kafka reader timed out (Timed out waiting for a node assignment. Call: listNodes)"
    """
    timed_out = _CLIENT_TIMEOUT.search(text)
    if not timed_out:
        return None
    return (f"lost Kafka at {','.join(brokers)}: Spark's Kafka reader timed out ({timed_out.group(1).strip()}); "
            "start the broker (or fix the network), then run the same command again: it resumes from the checkpoint")


def refused_settings(text: str) -> str | None:
    """Kafka's client refusing the ``kafka.`` settings it was given, as one line.

    >>> line = refused_settings("Failed to create new KafkaAdminClient ... org.apache.kafka.common.config."
    ...                         "ConfigException: default.api.timeout.ms must be no smaller than request.timeout.ms.")
    >>> print(line.split(";")[0])
    Kafka's client refused the kafka. settings of the source: default.api.timeout.ms must be no smaller than request.timeout.ms
    """
    refused = _CONFIG_REFUSED.search(text)
    if not refused:
        return None
    return (f"Kafka's client refused the kafka. settings of the source: {refused.group(1).strip().rstrip('.')}; "
            "fix the kafka.<setting> options of the kafka:// URI")


def lag_group(query: str) -> str:
    """The consumer group a query's read offsets are committed to, for lag tools.

    >>> lag_group("fleet_alerts")
    'speedlayer.fleet_alerts'
    """
    return f"speedlayer.{query}"


def kafka_client() -> Any:
    """confluent-kafka, the client speedlayer produces and administers Kafka with, or how to install it."""
    try:
        import confluent_kafka
    except ImportError:
        raise ConfigError("Kafka clients need confluent-kafka: pip install 'speedlayer[kafka]'") from None
    return confluent_kafka


def quiet() -> logging.Logger:
    """The logger given to librdkafka clients: their connection chatter stays out of the terminal."""
    logger = logging.getLogger("speedlayer.kafka")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
    return logger


def security_settings(options: dict[str, str]) -> dict[str, str]:
    """The settings of ``options`` about reaching the brokers (security, SASL, SSL), ``kafka.`` prefix or not,
    without it: what every client of the same cluster needs, whatever it does.

    >>> security_settings({"kafka.security.protocol": "SASL_SSL", "kafka.linger.ms": "5", "sasl.mechanism": "PLAIN"})
    {'security.protocol': 'SASL_SSL', 'sasl.mechanism': 'PLAIN'}
    """
    return {k.removeprefix("kafka."): v for k, v in options.items()
            if k.removeprefix("kafka.").startswith(("security.", "sasl.", "ssl."))}


def check_brokers(brokers: list[str], error: type[Exception]) -> None:
    """Fail with ``error`` when no broker accepts a TCP connection (the cheap check before start)."""
    for broker in brokers:
        host, _, port = broker.rpartition(":")
        try:
            with closing(socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)):
                return
        except OSError:
            continue
    raise error(f"no Kafka broker answers at {', '.join(brokers)}: start one, or fix the address")


def admin_client(bootstrap: str, options: dict[str, str] | None = None) -> Any:
    """confluent-kafka's AdminClient for ``bootstrap`` (``host:port,...``), with the security settings of ``options``."""
    kafka_client()
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 5000,
                        **security_settings(options or {})}, logger=quiet())


def topic_partitions(brokers: list[str], topics: list[str], options: dict[str, str],
                     timeout_s: float = CONNECT_TIMEOUT_S * 5) -> dict[str, int]:
    """How many partitions each of ``topics`` has (topics the broker does not know yet are left out)."""
    kafka = kafka_client()
    try:
        metadata = admin_client(",".join(brokers), options).list_topics(timeout=timeout_s)
    except kafka.KafkaException as exc:
        raise SourceError(f"could not list the topics at {', '.join(brokers)}: {exc.args[0].str()}") from None
    return {t: len(metadata.topics[t].partitions) for t in topics if t in metadata.topics}


def check_topics(brokers: list[str], topics: list[str], options: dict[str, str]) -> None:
    """Fail in one line when the brokers answer and hold none of a topic a run reads; when they cannot be
    asked (no confluent-kafka, a listing that fails), Spark's reader says what it finds."""
    try:
        found = topic_partitions(brokers, topics, options, timeout_s=CONNECT_TIMEOUT_S)
    except (ConfigError, SourceError):
        return
    missing = [t for t in topics if t not in found]
    if missing:
        where = ",".join(brokers)
        raise SourceError(f"Kafka at {where} has no topic {', '.join(missing)}: fix the name in the kafka:// URI, or "
                          f"create it first (speedlayer produce --to kafka://{where}/{missing[0]} creates it)")


def is_secret(option: str) -> bool:
    """Whether a Kafka client option holds a secret: what ``is_secret_option`` says of any setting,
    or a Kafka option ending in ``.key`` (a PEM private key such as ``ssl.keystore.key``)."""
    return is_secret_option(option) or option.lower().endswith(".key")


class KafkaOptions(BaseModel):
    starting_offsets: str = "latest"
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = Field(None, gt=0)

    @field_validator("starting_offsets")
    @classmethod
    def _offsets(cls, value: str) -> str:
        if value not in ("earliest", "latest") and not value.strip().startswith("{"):
            raise ValueError('use earliest, latest or a JSON object such as {"topic":{"0":42}}')
        return value


def parse_brokers(uri: Uri) -> list[str]:
    """The ``host:port`` list of a kafka URI (port 9092 when left out).

    >>> parse_brokers(parse_uri("kafka://k1/t"))  # doctest: +SKIP
    ['k1:9092']
    """
    netloc = urlsplit(uri.text).netloc
    if "@" in netloc:
        raise ConfigError(f"{uri.display}: put Kafka credentials in kafka.sasl.jaas.config, not in the URI")
    brokers = []
    for part in netloc.split(","):
        host, _, port = part.strip().partition(":")
        port = port or str(DEFAULT_PORT)
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{uri.display}: brokers are host:port pairs separated by commas, e.g. "
                              "kafka://broker1:9092,broker2:9092/topic")
        brokers.append(f"{host}:{int(port)}")
    return brokers


class KafkaSource(Source):
    """``kafka://host:port[,host:port]/topic[,topic]?startingOffsets=...&kafka.<client setting>=...``."""

    scheme = "kafka"
    summary = "Kafka topics through Spark's own Kafka connector"
    supports_continuous = True
    supports_realtime = True
    supports_max_events = False
    how_to_bound = "bound a Kafka run with --trigger available-now or --duration"

    def batch_rows(self, interval_ms: int) -> int | None:
        return self.options.max_offsets_per_trigger

    def lag(self, progress_source: dict) -> int | None:
        """Messages beyond the batch's end offsets, from the latest offsets Spark fetched."""
        return offsets_behind(progress_source)

    def batch_committed(self, query: str, progress_sources: list[dict]) -> None:
        """Commit the batch's end offsets to the consumer group ``speedlayer.<query>``, where
        ``kafka-consumer-groups``, Burrow or a Grafana lag panel look (Spark never commits to Kafka)."""
        offsets = {tp: off for entry in progress_sources if str(entry.get("description", "")).startswith("KafkaV2")
                   for tp, off in end_offsets(entry).items() if tp[0] in self.topics}
        if not offsets:
            return
        try:
            kafka = kafka_client()
            consumer = self._group_clients.get(query)
            if consumer is None:
                consumer = kafka.Consumer({"bootstrap.servers": ",".join(self.brokers), "group.id": lag_group(query),
                                           "enable.auto.commit": False, **security_settings(self.client_options)},
                                           logger=quiet())
                self._group_clients[query] = consumer
            consumer.commit(offsets=[kafka.TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())],
                            asynchronous=False)
        except Exception as exc:  # noqa: BLE001 — informational: the checkpoint holds the offsets that count
            if query not in self._warned:
                self._warned.add(query)
                log.warning("speedlayer: could not commit %s's offsets to consumer group %s (lag tools will not see "
                            "them; the run goes on): %s", query, lag_group(query), exc)

    def __init__(self, uri: Uri):
        super().__init__(uri)
        self.brokers = parse_brokers(uri)
        self.topics = [t for t in uri.path.strip("/").split(",") if t]
        if not self.topics or not all(_TOPIC.match(t) for t in self.topics):
            raise ConfigError(f"{uri.display}: name the topic after the brokers, e.g. kafka://localhost:9092/telemetry "
                              "(letters, digits, '.', '_', '-'; several separated by commas)")
        self.client_options = {k: v for k, v in uri.options.items() if k.startswith("kafka.")}
        for key in self.client_options:
            if key in _REFUSED:
                raise ConfigError(f"kafka:// option {key!r} cannot be set: {_REFUSED[key]}")
        own = {k: v for k, v in uri.options.items() if not k.startswith("kafka.")}
        self.options: KafkaOptions = parse_options(KafkaOptions, snake_case_options(own, "kafka://"), "kafka://")
        self._group_clients: dict[str, Any] = {}
        self._warned: set[str] = set()

    def spark_options(self) -> dict[str, str]:
        """Every option given to Spark's Kafka reader (secrets included: never print this)."""
        o = self.options
        options = {"kafka.bootstrap.servers": ",".join(self.brokers), "subscribe": ",".join(self.topics),
                   "startingOffsets": o.starting_offsets, "failOnDataLoss": str(o.fail_on_data_loss).lower()}
        if o.max_offsets_per_trigger:
            options["maxOffsetsPerTrigger"] = str(o.max_offsets_per_trigger)
        return {**options, **self.client_options}

    def describe(self) -> str:
        settings = [f"startingOffsets={self.options.starting_offsets}"]
        settings += [f"{k}={'***' if is_secret(k) else v}" for k, v in sorted(self.client_options.items())]
        return f"kafka {','.join(self.brokers)} topic {','.join(self.topics)} ({', '.join(settings)})"

    def check(self) -> None:
        check_brokers(self.brokers, SourceError)
        check_topics(self.brokers, self.topics, self.client_options)

    def explain_failure(self, text: str) -> str | None:
        return data_loss(text) or lost_brokers(text, self.brokers) or refused_settings(text)

    def spark_packages(self) -> list[str]:
        return [connector_package()]

    def limit_partitions(self, partitions: int) -> None:
        counts = topic_partitions(self.brokers, self.topics, self.client_options)
        total = sum(counts.values())
        if total > partitions:
            each = ", ".join(f"{topic} has {n}" for topic, n in counts.items())
            raise ConfigError(f"continuous and real-time mode keep a task running for each Kafka partition, and "
                              f"{each}: each query here has {partitions} core(s): give each query {total} "
                              f"(--master local[N]), or read a topic of at most {partitions} partition(s)")

    def check_session(self, spark: SparkSession) -> None:
        check_connector(spark)

    def _raw(self, records: DataFrame) -> DataFrame:
        position = ["partition", "offset"] if len(self.topics) == 1 else ["topic", "partition", "offset"]
        return records.select(
            F.col("value").cast("string").alias("value"),
            F.col("key").cast("string").alias("key"),
            F.concat_ws("/", *(F.col(c).cast("string") for c in position)).alias("offset"),
            F.col("timestamp").alias("ingest_time"),
        )

    def read_stream(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        return self._raw(spark.readStream.format(DATA_SOURCE).options(**self.spark_options()).load())

    def view_stream(self, spark: SparkSession, max_events: int | None = None, batches: int = 1) -> DataFrame:
        """The topics at most ``batches`` × ``maxOffsetsPerTrigger`` records a batch."""
        options = self.spark_options()
        if "maxOffsetsPerTrigger" in options:
            options["maxOffsetsPerTrigger"] = str(int(options["maxOffsetsPerTrigger"]) * batches)
        return self._raw(spark.readStream.format(DATA_SOURCE).options(**options).load())

    def read_batch(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        """Everything from ``startingOffsets`` (earliest when it is latest) to the current end of the topic."""
        options = {k: v for k, v in self.spark_options().items() if k != "maxOffsetsPerTrigger"}
        if options["startingOffsets"] == "latest":
            options["startingOffsets"] = "earliest"
        df = self._raw(spark.read.format(DATA_SOURCE).options(**options).option("endingOffsets", "latest").load())
        return df.limit(max_events) if max_events is not None else df
