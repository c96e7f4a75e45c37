"""Writing micro-batches to Kafka exactly once: one Kafka transaction per batch, its batch id inside it.

Spark's own Kafka sink is at-least-once: a batch replayed after a crash is written again. Here the
driver writes each micro-batch in one transaction of a transactional producer whose
``transactional.id`` belongs to the output (``speedlayer.<job>.<output>.<topic>``), and commits in
the same transaction, as the offset of a consumer group of the same name on the topic's partition
0, the batch id plus one. So for a consumer that reads with ``isolation.level=read_committed``:

- a batch that failed before its commit is invisible (the broker aborts it when the restarted
  producer calls ``init_transactions``, which also fences any older producer of the same id);
- a batch that committed but that Spark replays (it crashed before recording the batch as done)
  is recognised by the committed batch id and skipped.

Rows go through the driver (``toArrow``), so a batch must fit in its memory: bound batches with
``maxOffsetsPerTrigger`` (kafka:// sources) or ``max_records_per_trigger``. A row larger than the
producer's ``message.max.bytes`` is refused before anything is sent and kept as a dead letter of
the run (``Target.rejected``), like a row a database refuses.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from speedlayer.core.errors import SinkError
from speedlayer.core.faults import reached
from speedlayer.sinks.batches import keep_refused, retrying
from speedlayer.sources.kafka import kafka_client, quiet, security_settings

log = logging.getLogger("speedlayer.sinks")
#: librdkafka's default ``message.max.bytes`` (the broker's default limit is about the same)
DEFAULT_MAX_BYTES = 1_000_000
#: bytes a record adds to its key and value (headers, lengths, timestamp): what the limit is checked against
RECORD_OVERHEAD = 512
#: how long recording the batch id may take before the producer is taken for stuck and replaced (one
#: small request to the group coordinator; librdkafka can wait past its own timeout after a broker restart)
MARKER_TIMEOUT_S = 10.0


def marker_group(job: str, output: str, topic: str) -> str:
    """The transactional id and consumer group that tie an output's batches to a topic.

    >>> marker_group("fleet", "alerts", "fleet-alerts")
    'speedlayer.fleet.alerts.fleet-alerts'
    """
    return f"speedlayer.{job}.{output}.{topic}"


def last_batch(brokers: str, topic: str, group: str, settings: dict[str, str], timeout_s: float = 60.0) -> tuple[int, Any]:
    """The last batch id committed to ``topic`` by the writer ``group`` (-1: none), and the group's metadata.

    A coordinator that is moving or loading (``NOT_COORDINATOR``, ``COORDINATOR_LOAD_IN_PROGRESS``:
    usual for a group asked about for the first time) is asked again until ``timeout_s``.
    """
    kafka = kafka_client()
    consumer = kafka.Consumer({"bootstrap.servers": brokers, "group.id": group, "enable.auto.commit": False,
                               "isolation.level": "read_committed", **security_settings(settings)}, logger=quiet())
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                [mark] = consumer.committed([kafka.TopicPartition(topic, 0)], timeout=30)
                return (mark.offset - 1 if mark.offset >= 0 else -1), consumer.consumer_group_metadata()
            except kafka.KafkaException as exc:
                error = exc.args[0]
                if not (error.retriable() or error.code() in _TRANSIENT) or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


@dataclass
class Transactions:
    """The ``foreachBatch`` function of the exactly-once Kafka sink (runs on the driver)."""

    brokers: str
    topic: str
    group: str
    settings: dict[str, str] = field(default_factory=dict)
    retry_for_s: float = 120.0
    #: keeps refused rows as the run's dead letters (``rejects.RejectStore``), or None: they fail the batch
    store: Any = None
    output: str = ""
    _producer: Any = field(default=None, repr=False)
    _committed: int = field(default=-1, repr=False)
    #: rows written and refused by the last batch (for logs and tests)
    last_rows: int = field(default=0, repr=False)
    last_refused: list = field(default_factory=list, repr=False)

    @property
    def what(self) -> str:
        return f"Kafka topic {self.topic} at {self.brokers}"

    def _config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.brokers, "transactional.id": self.group, "enable.idempotence": True,
                "transaction.timeout.ms": 300_000, "partitioner": "murmur2_random", "linger.ms": 5,
                "socket.connection.setup.timeout.ms": 5000, **self.settings}

    @property
    def call_timeout_s(self) -> float:
        """How long one call to the broker may take: 30 s, or less where ``retry_for`` is shorter."""
        return min(30.0, max(5.0, self.retry_for_s))

    def max_bytes(self) -> int:
        return int(self.settings.get("message.max.bytes", DEFAULT_MAX_BYTES))

    def _start(self) -> None:
        """A new producer: fences older ones of the same id, aborts their open transaction, then reads
        the last batch id committed (no transaction of this id is pending any more)."""
        kafka = kafka_client()
        producer = kafka.Producer(self._config(), logger=quiet())
        producer.init_transactions(self.call_timeout_s)
        self._committed, self._metadata = last_batch(self.brokers, self.topic, self.group, self.settings,
                                                     self.call_timeout_s)
        self._producer = producer

    def committed_batch(self) -> int:
        """The last batch id committed to the topic (-1: none)."""
        if self._producer is None:
            self._start()
        return self._committed

    def __call__(self, batch_df, batch_id: int) -> None:
        reached("planned", batch_id, self.what)
        if self._attempt(lambda: self.committed_batch()) >= batch_id:
            log.info("speedlayer: batch %d of %s already committed to %s: skipped", batch_id, self.output, self.what)
            # Still run the batch through: a stateful query's state stores commit only when every partition
            # of the batch is computed (Spark fails the batch otherwise), and nothing here writes anywhere.
            batch_df.write.format("noop").mode("overwrite").save()
            self.last_rows, self.last_refused = 0, []
            reached("written", batch_id, self.what)
            return
        table = batch_df.toArrow()
        keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
        limit, refused, records = self.max_bytes(), [], []
        for key, value in zip(keys, values):
            size = len(value.encode()) + (len(key.encode()) if key else 0) + RECORD_OVERHEAD
            if size > limit:
                refused.append((value, f"record of {size:,} bytes is over the producer's message.max.bytes "
                                       f"({limit:,})", key or ""))
            else:
                records.append((key, value))
        if refused:
            keep_refused(self.store, refused, batch_id, self.output, self.what)
        self._attempt(lambda: self._write(records, batch_id))
        self._committed = batch_id
        self.last_rows, self.last_refused = len(records), refused
        reached("written", batch_id, self.what)

    def _write(self, records: list[tuple[str | None, str]], batch_id: int) -> None:
        kafka = kafka_client()
        producer = self._producer
        failures: list = []
        timeout = self.call_timeout_s

        def delivered(error, message) -> None:
            if error is not None:
                failures.append(error)

        producer.begin_transaction()
        try:
            for n, (key, value) in enumerate(records):
                while True:
                    try:
                        producer.produce(self.topic, value=value, key=key, on_delivery=delivered)
                        break
                    except BufferError:  # the local queue is full: let librdkafka send
                        _delivered(producer, failures, timeout)
                if n == 0:
                    reached("mid-write", batch_id, self.what)
            _delivered(producer, failures, timeout)
            offsets = [kafka.TopicPartition(self.topic, 0, batch_id + 1)]
            marker_timeout = min(timeout, MARKER_TIMEOUT_S)
            _within(marker_timeout, lambda: producer.send_offsets_to_transaction(offsets, self._metadata, marker_timeout),
                    "recording the batch id in the transaction")
            reached("partition-written", batch_id, self.what)
            producer.commit_transaction(timeout)
        except _Stuck:
            self._producer = None  # still inside a call: not to be used again; the next producer fences it
            raise
        except BaseException:
            self._abort()
            raise

    def _abort(self) -> None:
        """Abort the open transaction; where that fails too, drop the producer (the next one fences it)."""
        try:
            self._producer.abort_transaction(self.call_timeout_s)
        except Exception:  # noqa: BLE001 — a broken producer is replaced on the next attempt
            self._producer = None

    def _attempt(self, action):
        """Run ``action``; a retriable Kafka error starts a new producer and tries again for ``retry_for_s``."""
        kafka = kafka_client()

        def attempt():
            try:
                if self._producer is None:
                    self._start()
                return action()
            except kafka.KafkaException as exc:
                error = exc.args[0]
                if error.code() in (kafka.KafkaError._FENCED, kafka.KafkaError.PRODUCER_FENCED,
                                    kafka.KafkaError.INVALID_PRODUCER_EPOCH):
                    raise SinkError(f"another writer took over transactional id {self.group!r} of {self.what}: "
                                    "two runs write this output to this topic; stop one of them") from None
                retriable = error.retriable() or error.txn_requires_abort() or error.code() in _TRANSIENT
                raise _Failed(error.str(), retriable) from None

        def new_producer() -> None:
            self._producer = None  # a new producer fences this one and aborts what it left open

        return retrying(attempt, transient=lambda exc: getattr(exc, "transient", False), retry_for_s=self.retry_for_s,
                        what=self.what, on_failure=new_producer, server="broker")


def _delivered(producer, failures: list, timeout_s: float) -> None:
    """Wait until what was produced is delivered; the first failed delivery, or what is left after
    ``timeout_s``, is raised (the broker's own error: ``_attempt`` tells a refusal from an outage)."""
    left = producer.flush(timeout_s)
    if failures:
        raise kafka_client().KafkaException(failures[0])
    if left:
        raise _Failed(f"{left:,} records not delivered within {timeout_s:g}s", transient=True)


class _Failed(Exception):
    """A Kafka call that failed, and whether a new producer may succeed where it did."""

    def __init__(self, reason: str, transient: bool) -> None:
        super().__init__(reason)
        self.transient = transient


class _Stuck(_Failed):
    """A producer call that outlived its own timeout (the producer is left to the thread that waits in it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, transient=True)


def _within(timeout_s: float, call, what: str) -> None:
    """``call()``, given ``timeout_s`` plus a grace to return: librdkafka's ``send_offsets_to_transaction``
    can wait past its timeout for a group coordinator it lost track of while the broker was away.
    A call still waiting is left to its thread and raises ``_Stuck``, which ``_attempt`` retries
    with a new producer (whose ``init_transactions`` fences the stuck one and aborts its transaction)."""
    outcome: list = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 — handed back to the caller's thread
            outcome.append(exc)

    worker = threading.Thread(target=run, name="speedlayer-kafka-txn", daemon=True)
    worker.start()
    worker.join(timeout_s + 5)
    if not outcome:
        raise _Stuck(f"{what} took over {timeout_s + 5:g}s")
    if outcome[0] is not None:
        raise outcome[0]


def _transient_codes() -> tuple:
    try:
        from confluent_kafka import KafkaError
    except ImportError:
        return ()
    return (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._MSG_TIMED_OUT,
            KafkaError.REQUEST_TIMED_OUT, KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
            KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.CONCURRENT_TRANSACTIONS, KafkaError.UNSTABLE_OFFSET_COMMIT)


_TRANSIENT = _transient_codes()
