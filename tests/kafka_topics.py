"""Topics on the suite's Kafka broker, made and read with confluent-kafka (never with speedlayer's own code).

>>> topics = KafkaTopics("127.0.0.1:9092"); name = topics.create()  # doctest: +SKIP
>>> topics.produce(name, [("k", "v")]); topics.read(name)           # doctest: +SKIP
[Record(key='k', value='v', partition=0, offset=0, timestamp_ms=...)]
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Record:
    key: str | None
    value: str | None
    partition: int
    offset: int
    timestamp_ms: int


@dataclass
class KafkaTopics:
    bootstrap: str
    created: list[str] = field(default_factory=list)

    def _admin(self):
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create(self, partitions: int = 2, prefix: str = "t", config: dict[str, str] | None = None) -> str:
        """A new topic with a unique name."""
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        self.recreate(name, partitions, config)
        self.created.append(name)
        return name

    def names(self) -> set[str]:
        """Every topic the broker holds now."""
        return set(self._admin().list_topics(timeout=30).topics)

    def recreate(self, name: str, partitions: int = 2, config: dict[str, str] | None = None) -> None:
        """Create topic ``name`` (again, after ``delete``: the broker may still be removing the old one)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic

        admin = self._admin()  # held until the futures are done: a client that is collected cancels them
        for attempt in range(60):
            try:
                for future in admin.create_topics([NewTopic(name, partitions, 1, config=config or {})]).values():
                    future.result(30)
                return
            except KafkaException as exc:
                if "marked for deletion" not in str(exc) and "already exists" not in str(exc) or attempt == 59:
                    raise
                time.sleep(0.5)

    def delete(self, name: str) -> None:
        from confluent_kafka import KafkaException

        admin = self._admin()
        for future in admin.delete_topics([name]).values():
            try:
                future.result(30)
            except KafkaException:  # already gone
                pass

    def topic_config(self, name: str, key: str) -> str:
        """One setting of a topic, as the broker reports it."""
        from confluent_kafka.admin import ConfigResource

        admin, resource = self._admin(), ConfigResource("topic", name)
        return admin.describe_configs([resource])[resource].result(30)[key].value

    def produce(self, topic: str, records: list[tuple[str | None, str | bytes]], partition: int | None = None) -> None:
        """Write (key, value) records and wait until the broker has them all."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        extra = {} if partition is None else {"partition": partition}
        for key, value in records:
            producer.produce(topic, key=key, value=value, **extra)
            producer.poll(0)
        assert producer.flush(60) == 0, f"records to {topic} were not acknowledged"

    def read(self, topic: str, committed_only: bool = True, timeout_s: float = 30) -> list[Record]:
        """Every record of the topic up to its current end, as a consumer with ``isolation.level``
        ``read_committed`` (or ``read_uncommitted``) sees them."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False, "enable.partition.eof": True,
                             "isolation.level": "read_committed" if committed_only else "read_uncommitted"})
        try:
            partitions = consumer.list_topics(topic, timeout=timeout_s).topics[topic].partitions
            consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
            records: list[Record] = []
            at_end: set[int] = set()  # partitions read up to their end (read_committed: the last stable offset)
            while at_end != set(partitions):
                message = consumer.poll(timeout_s)
                assert message is not None, f"no record from {topic} within {timeout_s}s (read {len(records)})"
                if message.error():
                    if message.error().code() != KafkaError._PARTITION_EOF:
                        raise AssertionError(message.error().str())
                    at_end.add(message.partition())
                    continue
                key, value = message.key(), message.value()
                records.append(Record(key.decode() if key is not None else None, value.decode() if value is not None else None,
                                      message.partition(), message.offset(), message.timestamp()[1]))
            return records
        finally:
            consumer.close()
