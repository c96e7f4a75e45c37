"""Publish to Kafka: ``kafka://host:9092[,host2:9092]/topic`` with confluent-kafka (key = vehicle id, value = JSON).

The URI is the Kafka source's: its reader options (``startingOffsets``...) are accepted and
ignored, and ``kafka.``-prefixed settings go to librdkafka without the prefix (librdkafka's names,
e.g. ``kafka.security.protocol=SASL_SSL&kafka.sasl.mechanism=PLAIN``). librdkafka batches and
retries; ``close`` waits until every message is acknowledged and raises SinkError if one was not.
An unreachable broker is found before anything is computed.
"""

from __future__ import annotations

import logging

from speedlayer.core.errors import ConfigError, SinkError
from speedlayer.core.uris import Uri, parse_options
from speedlayer.producers.base import Destination, EventSlice
from speedlayer.sources.base import snake_case_options
from speedlayer.sources.kafka import KafkaOptions, parse_brokers

_QUIET = logging.getLogger("speedlayer.kafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def _kafka():
    try:
        import confluent_kafka
    except ImportError:
        raise ConfigError("the Kafka producer needs confluent-kafka: pip install 'speedlayer[kafka]'") from None
    return confluent_kafka


class KafkaDestination(Destination):
    scheme = "kafka"

    def __init__(self, uri: Uri):
        super().__init__(uri)
        self.brokers = parse_brokers(uri)
        self.topic = uri.path.strip("/")
        if not self.topic or "/" in self.topic or "," in self.topic:
            raise ConfigError(f"{uri.display}: write kafka://host:9092/topic (one topic)")
        own = {k: v for k, v in uri.options.items() if not k.startswith("kafka.")}
        parse_options(KafkaOptions, snake_case_options(own, "kafka://"), "kafka://")
        self.settings = {k.removeprefix("kafka."): v for k, v in uri.options.items() if k.startswith("kafka.")}
        self.address = ",".join(self.brokers)
        self._producer = None
        self._failure: str | None = None

    def describe(self) -> str:
        return f"Kafka topic {self.topic} at {self.address}"

    def _new_producer(self):
        kafka = _kafka()
        config = {"bootstrap.servers": self.address, "socket.connection.setup.timeout.ms": 5000,
                  "linger.ms": 20, "enable.idempotence": True, **self.settings}
        try:
            return kafka.Producer(config, logger=_QUIET)
        except kafka.KafkaException as exc:
            raise ConfigError(f"{self.uri.display}: Kafka refused a setting: {exc.args[0].str()} "
                              "(kafka.* options take librdkafka's names)") from None

    def check(self) -> None:
        kafka = _kafka()
        producer = self._new_producer()
        try:
            metadata = producer.list_topics(topic=self.topic, timeout=8)
        except kafka.KafkaException as exc:
            raise SinkError(f"cannot reach Kafka at {self.address}: {exc.args[0].str()}; "
                            "start the broker or fix the URI") from None
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None:
            reason = topic.error.str() if topic is not None and topic.error is not None else "unknown topic"
            raise SinkError(f"Kafka at {self.address} has no topic {self.topic!r} ({reason}): "
                            "create it or enable auto.create.topics.enable")

    def open(self) -> None:
        self._producer = self._new_producer()

    def _delivered(self, error, message) -> None:  # noqa: ARG002
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
