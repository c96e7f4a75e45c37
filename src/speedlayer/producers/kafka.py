"""Publish to Kafka: ``kafka://host:9092[,host2:9092]/topic`` with confluent-kafka (key = vehicle id, value = JSON).

The URI is the Kafka source's: its reader options (``startingOffsets``...) are accepted and
ignored; ``partitions`` (4) is how many partitions a missing topic is created with (keys, vehicle
ids, spread over them); ``kafka.``-prefixed settings go to librdkafka without the prefix (librdkafka's names,
e.g. ``kafka.security.protocol=SASL_SSL&kafka.sasl.mechanism=PLAIN``). librdkafka batches and
retries; ``close`` waits until every message is acknowledged and raises SinkError if one was not.
An unreachable broker is found before anything is computed.
"""

from __future__ import annotations

from speedlayer.core.errors import ConfigError, SinkError
from speedlayer.core.uris import Uri, parse_options
from speedlayer.producers.base import Destination, EventSlice
from speedlayer.sources.base import snake_case_options
from speedlayer.sources.kafka import KafkaOptions, admin_client, check_brokers, kafka_client, parse_brokers, quiet

#: partitions of a topic the producer creates (keys, vehicle ids, spread over them)
DEFAULT_PARTITIONS = 4


def _partitions(text: str, uri: Uri) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{uri.display}: partitions is the number of partitions of a topic to create, e.g. partitions=4")
    return int(text)


class KafkaDestination(Destination):
    scheme = "kafka"

    def __init__(self, uri: Uri):
        super().__init__(uri)
        self.brokers = parse_brokers(uri)
        self.topic = uri.path.strip("/")
        if not self.topic or "/" in self.topic or "," in self.topic:
            raise ConfigError(f"{uri.display}: write kafka://host:9092/topic (one topic)")
        own = {k: v for k, v in uri.options.items() if not k.startswith("kafka.")}
        self.partitions = _partitions(own.pop("partitions", str(DEFAULT_PARTITIONS)), uri)
        parse_options(KafkaOptions, snake_case_options(own, "kafka://"), "kafka://")
        self.settings = {k.removeprefix("kafka."): v for k, v in uri.options.items() if k.startswith("kafka.")}
        self.address = ",".join(self.brokers)
        self._producer = None
        self._failure: str | None = None
        self.created = ""

    def describe(self) -> str:
        return f"Kafka topic {self.topic} at {self.address}" + (f" ({self.created})" if self.created else "")

    def _new_producer(self):
        kafka = kafka_client()
        config = {"bootstrap.servers": self.address, "socket.connection.setup.timeout.ms": 5000,
                  "linger.ms": 20, "enable.idempotence": True, **self.settings}
        try:
            return kafka.Producer(config, logger=quiet())
        except kafka.KafkaException as exc:
            raise ConfigError(f"{self.uri.display}: Kafka refused a setting: {exc.args[0].str()} "
                              "(kafka.* options take librdkafka's names)") from None

    def check(self) -> None:
        """Reach the brokers; create the topic with ``partitions`` partitions when it is missing."""
        kafka = kafka_client()
        from confluent_kafka.admin import NewTopic

        self._new_producer()  # a refused setting is told now, before anything is computed
        check_brokers(self.brokers, SinkError)  # no broker at all: said at once, as a run says it
        admin = admin_client(self.address, self.settings)
        try:
            metadata = admin.list_topics(timeout=8)  # all topics: asking for one would auto-create it with 1 partition
        except kafka.KafkaException as exc:
            raise SinkError(f"cannot reach Kafka at {self.address}: {exc.args[0].str()}; "
                            "start the broker or fix the URI") from None
        if self.topic in metadata.topics:
            return
        try:
            for future in admin.create_topics([NewTopic(self.topic, self.partitions)]).values():
                future.result(30)
        except kafka.KafkaException as exc:
            raise SinkError(f"Kafka at {self.address} has no topic {self.topic!r} and did not create it "
                            f"({exc.args[0].str()}): create it, or let this user create topics") from None
        self.created = f"created with {self.partitions} partition{'s' if self.partitions > 1 else ''}"

    def open(self) -> None:
        self._producer = self._new_producer()

    def _delivered(self, error, message) -> None:
        if error is not None and self._failure is None:
            self._failure = error.str()

    def write(self, events: EventSlice) -> None:
        producer = self._producer
        for key, value in zip(events.keys, events.values):
            while True:
                try:
                    producer.produce(self.topic, value=value, key=key, on_delivery=self._delivered)
                    break
                except BufferError:  # the local queue is full: let librdkafka send
                    producer.poll(0.1)
        producer.poll(0)
        if self._failure:
            raise SinkError(f"Kafka at {self.address} refused a message: {self._failure}")

    def close(self) -> None:
        if self._producer is None:
            return
        left = self._producer.flush(60)
        self._producer = None
        if left or self._failure:
            raise SinkError(f"{left} messages to Kafka at {self.address} were not acknowledged"
                            + (f" ({self._failure})" if self._failure else "") + ": check the broker")
