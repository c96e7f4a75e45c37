"""Latency as a Kafka user measures it: output append time minus input append time, one broker, one clock.

A cell publishes fleet pings to a new input topic at a fixed rate, runs the alerts query from it into a
new output topic (both topics stamp records with the broker's ``LogAppendTime``), and then reads the
output topic back. An alert's latency is its record's append time minus the append time of the ping it
came from (the producer's delivery report gives the latter, keyed by event id), so neither Spark's
clock nor the producer's enters the figure. Only pings appended in the measured span (after a warm-up)
count.

    >>> alerts = speedlayer_alerts(spark, "localhost:9092", "continuous:1s", "/tmp/state")          # doctest: +SKIP
    >>> measure_cell("localhost:9092", "speedlayer", "continuous:1s", 1_000, alerts).p99_ms       # doctest: +SKIP
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from speedlayer.bench.cell import percentile
from speedlayer.core.errors import SpeedlayerError
from speedlayer.runtime.triggers import parse_trigger
from speedlayer.sources.kafka import admin_client, kafka_client, quiet

#: both topics stamp each record with the broker's clock when it is appended
LOG_APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}
#: how long a cell waits after the last ping for the alerts of the measured span to arrive
DRAIN_S = 30.0


@dataclass
class KafkaCell:
    """One (side, trigger, rate) measurement; latencies in milliseconds."""

    side: str
    mode: str
    rate: int
    sent: int = 0
    measured: int = 0
    #: the measured span: pings appended from its start (inclusive) to its end (exclusive), epoch ms
    span_ms: tuple[int, int] = (0, 0)
    p50_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    max_ms: float | None = None
    #: pings per second the producer reached (below ``rate``: the producer, not the query, bounds the cell)
    produced_rate: float = 0.0
    status: str = "ok"
    reason: str = ""
    #: micro-batch cells: which copy of a re-sent ping the dedup keeps (``--dedup``); None in other modes
    dedup: str | None = None
    #: which of a run's repeats of the same (side, mode, rate) this is, from 1
    round: int = 1

    @property
    def label(self) -> str:
        """The cell's run as options: its trigger, and ``--dedup fast`` where it is not the default."""
        return cell_label(self.mode, self.dedup)


def cell_label(mode: str, dedup: str | None) -> str:
    """``processing:0s --dedup fast``; the trigger alone with the default dedup or none.

    >>> cell_label("processing:0s", "fast"), cell_label("processing:0s", "exact"), cell_label("continuous:1s", None)
    ('processing:0s --dedup fast', 'processing:0s', 'continuous:1s')
    """
    return f"{mode} --dedup {dedup}" if dedup and dedup != "exact" else mode


def ping(n: int, now_ms: int, rng: random.Random, vehicles: int = 500) -> tuple[str, bytes]:
    """Ping ``n`` as (key, JSON value): keyed by vehicle, its event time now, somewhere in Berlin."""
    vehicle = f"V{n % vehicles:05d}"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now_ms / 1000)) + f".{now_ms % 1000:03d}Z"
    value = {"event_id": f"b-{n:010d}", "vehicle_id": vehicle, "event_time": stamp,
             "speed_kmh": round(rng.uniform(20, 130), 1), "lat": round(rng.uniform(52.40, 52.62), 5),
             "lon": round(rng.uniform(13.20, 13.60), 5)}
    return vehicle, json.dumps(value, separators=(",", ":")).encode()


def _event_id(value: bytes) -> str:
    # the value starts {"event_id":"b-..." (ping writes it first)
    return value[13:25].decode()


class PacedProducer(threading.Thread):
    """Publishes pings at ``rate`` per second until stopped; ``appended`` maps each event id to the
    broker's append time from its delivery report."""

    def __init__(self, bootstrap: str, topic: str, rate: int, seed: int = 7):
        super().__init__(daemon=True, name=f"paced-producer-{topic}")
        self.topic, self.rate, self.rng = topic, rate, random.Random(seed)
        self.producer = kafka_client().Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": 1},
                                                logger=quiet())
        self.appended: dict[str, int] = {}
        self.sent = 0
        self.stop_event = threading.Event()
        self.started_s = 0.0
        self.stopped_s = 0.0

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:  # a ping the broker refused is not measured
            self.appended[_event_id(msg.value())] = msg.timestamp()[1]

    def run(self) -> None:
        self.started_s = time.monotonic()
        while not self.stop_event.is_set():
            due = int((time.monotonic() - self.started_s) * self.rate)
            now_ms = int(time.time() * 1000)
            while self.sent < due:
                key, value = ping(self.sent, now_ms, self.rng)
                try:
                    self.producer.produce(self.topic, key=key, value=value, on_delivery=self._delivered)
                except BufferError:  # the client's queue is full: let it drain
                    break
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.002)
        self.stopped_s = time.monotonic()
        self.producer.flush(30)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(60)


def drain_appended(bootstrap: str, topic: str, quiet_s: float = 3, deadline_s: float = DRAIN_S) -> dict[str, int]:
    """Key -> append time of each record of ``topic`` (read committed; a repeated key keeps its first), read
    until no record has come for ``quiet_s`` or ``deadline_s`` has passed."""
    kafka = kafka_client()
    consumer = kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{uuid.uuid4().hex[:8]}",
                               "enable.auto.commit": False, "isolation.level": "read_committed"}, logger=quiet())
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([kafka.TopicPartition(topic, p, 0) for p in partitions])
        seen: dict[str, int] = {}
        now = time.monotonic()
        last, deadline = now, now + deadline_s
        while now - last < quiet_s and now < deadline:
            for message in consumer.consume(10_000, timeout=0.5):
                if message.error():
                    raise SpeedlayerError(f"reading {topic}: {message.error().str()}")
                if message.key() is not None:
                    seen.setdefault(message.key().decode(), message.timestamp()[1])
                last = time.monotonic()
            now = time.monotonic()
        return seen
    finally:
        consumer.close()


def create_topics(bootstrap: str, names: dict[str, int]) -> None:
    """Create topics (name -> partitions) stamped with the broker's append time."""
    from confluent_kafka.admin import NewTopic

    admin = admin_client(bootstrap)  # held until the futures are done: a collected client cancels them
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=LOG_APPEND_TIME) for name, partitions in names.items()])
    for future in futures.values():
        future.result(30)


def delete_topics(bootstrap: str, names: list[str]) -> None:
    admin = admin_client(bootstrap)
    for future in admin.delete_topics(names).values():
        try:
            future.result(30)
        except Exception:  # noqa: BLE001 — a topic left behind costs disk only
            pass


#: start(input topic, output topic) -> a stop function: the query under test, running
Starter = Callable[[str, str], Callable[[], None]]


def measure_cell(bootstrap: str, side: str, mode: str, rate: int, start: Starter, warmup_s: float = 15,
                 measure_s: float = 60, partitions: int = 2, dedup: str | None = None) -> KafkaCell:
    """Publish at ``rate`` for ``warmup_s + measure_s`` into a new topic that ``start``'s query reads,
    then read its output topic and compute the latency of the alerts of pings appended in the measured span."""
    tag = uuid.uuid4().hex[:8]
    source, out = f"lat_in_{tag}", f"lat_out_{tag}"
    create_topics(bootstrap, {source: partitions, out: 1})
    cell = KafkaCell(side, mode, rate, dedup=dedup)
    producer = PacedProducer(bootstrap, source, rate)
    try:
        stop_query = start(source, out)
    except SpeedlayerError as exc:
        delete_topics(bootstrap, [source, out])
        cell.status, cell.reason = "not supported", str(exc)
        return cell
    try:
        producer.start()
        time.sleep(warmup_s)
        span_start_ms = int(time.time() * 1000)
        time.sleep(measure_s)
        span_end_ms = int(time.time() * 1000)
        cell.span_ms = (span_start_ms, span_end_ms)
        producer.stop()
        cell.sent = producer.sent
        cell.produced_rate = producer.sent / max(producer.stopped_s - producer.started_s, 1e-9)
        measured_ids = {e for e, t in producer.appended.items() if span_start_ms <= t < span_end_ms}
        # alerts are a subset of the pings: read until no more arrive rather than up to a count
        arrived = drain_appended(bootstrap, out)
    finally:
        stop_query()
        delete_topics(bootstrap, [source, out])
    latencies = [arrived[e] - producer.appended[e] for e in measured_ids if e in arrived]
    cell.measured = len(latencies)
    if not latencies:
        cell.status, cell.reason = "no alerts", f"none of {len(measured_ids):,} measured pings came out as an alert"
        return cell
    cell.p50_ms, cell.p99_ms = percentile(latencies, 50), percentile(latencies, 99)
    cell.p999_ms, cell.max_ms = percentile(latencies, 99.9), max(latencies)
    return cell


def speedlayer_alerts(spark: Any, bootstrap: str, trigger: str, state_root: str, windows: bool = False,
                      dedup: str = "exact") -> Starter:
    """The fleet alerts through speedlayer's runner, from the input topic into the output topic
    (Spark's own Kafka sink, ``spark-kafka://``, the one sink all three modes can write). With
    ``windows``, ``make run``'s job: the windows too, a query of their own, into ``<output>_windows``."""
    from speedlayer.runtime.plan import plan_run
    from speedlayer.runtime.run import Run
    from speedlayer.runtime.settings import RunSettings

    def start(source: str, out: str) -> Callable[[], None]:
        sinks = {"alerts": f"spark-kafka://{bootstrap}/{out}"}
        if windows:
            sinks["windows"] = f"spark-kafka://{bootstrap}/{windows_topic(out)}"
        settings = RunSettings(job="fleet", trigger=trigger, state_dir=f"{state_root}/{source}", dedup=dedup,
                               source=f"kafka://{bootstrap}/{source}?startingOffsets=earliest", sinks=sinks, conf={})
        run = Run(spark, plan_run(settings))  # a refusal (a ConfigError) marks the cell "not supported"
        if windows:
            create_topics(bootstrap, {windows_topic(out): 1})
        run.start()

        def stop() -> None:
            run.stop_requested.set()
            run.wait()
            run.cleanup()
            if windows:
                delete_topics(bootstrap, [windows_topic(out)])
        return stop
    return start


def windows_topic(out: str) -> str:
    """Where a cell of ``make run``'s job writes its windows, beside the alerts' ``out``."""
    return f"{out}_windows"


#: the triggers ``speedlayer bench --kafka`` measures by default, one per processing mode
KAFKA_MODES = ("continuous:1s", "realtime:1min", "processing:0s")


def cell_line(cell: KafkaCell) -> str:
    """One cell in one line, as the bench prints it when the cell is done (a repeat says its round)."""
    side = f"{cell.side} {cell.label} {cell.rate:,}/s" + (f" (round {cell.round})" if cell.round > 1 else "")
    if cell.status != "ok":
        return f"{side}: {cell.status}: {cell.reason}"
    return (f"{side}: p50 {cell.p50_ms:,.0f} ms, p99 {cell.p99_ms:,.0f} ms, "
            f"p99.9 {cell.p999_ms:,.0f} ms, max {cell.max_ms:,.0f} ms ({cell.measured:,} alerts; "
            f"produced {cell.produced_rate:,.0f}/s of {cell.rate:,}/s)")


def kafka_session(master: str, log_file: Any) -> Any:
    """A session with Spark's Kafka connector (``spark.jars.packages``, Maven's local repository first)."""
    from speedlayer.runtime.session import build_session
    from speedlayer.sources.kafka_connector import connector_package

    return build_session(master, {"spark.ui.enabled": "false", "spark.jars.packages": connector_package()},
                         app_name="speedlayer-bench-kafka", log_file=log_file)


def bench_cells(modes: tuple[str, ...], rates: tuple[int, ...], dedups: tuple[str, ...],
                rounds: int = 1) -> list[tuple[int, str, str | None, int]]:
    """The (rate, mode, dedup, round) cells in the order they run: micro-batch once per dedup, other modes once
    (they run no dedup), each ``rounds`` times in a row.

    >>> bench_cells(("continuous:1s", "processing:0s"), (1000,), ("exact", "fast"))
    [(1000, 'continuous:1s', None, 1), (1000, 'processing:0s', 'exact', 1), (1000, 'processing:0s', 'fast', 1)]
    >>> bench_cells(("realtime:1min",), (1000,), ("exact",), rounds=2)
    [(1000, 'realtime:1min', None, 1), (1000, 'realtime:1min', None, 2)]
    """
    return [(rate, mode, dedup, round_) for rate in rates for mode in modes
            for dedup in (dedups if parse_trigger(mode).kind == "processing" else (None,))
            for round_ in range(1, rounds + 1)]


def run_kafka_bench(spark: Any, bootstrap: str, modes: tuple[str, ...], rates: tuple[int, ...], warmup_s: float,
                    measure_s: float, state_root: str, on_cell: Callable[[KafkaCell], None],
                    dedups: tuple[str, ...] = ("exact",), rounds: int = 1) -> list[KafkaCell]:
    """Every cell of ``bench_cells`` of the fleet alerts through speedlayer, Kafka -> Kafka, in turn, after one
    cell not kept that warms the session's JVM up (a fresh JVM's first minute runs uncompiled code)."""
    warm_up_session(bootstrap, modes[0], rates[0], speedlayer_alerts(spark, bootstrap, modes[0], state_root))
    cells = []
    for rate, mode, dedup, round_ in bench_cells(modes, rates, dedups, rounds):
        query = speedlayer_alerts(spark, bootstrap, mode, state_root, dedup=dedup or "exact")
        cell = measure_cell(bootstrap, "speedlayer", mode, rate, query, warmup_s, measure_s, dedup=dedup)
        cell.round = round_
        on_cell(cell)
        cells.append(cell)
    return cells


def warm_up_session(bootstrap: str, mode: str, rate: int, start: Starter, seconds: float = 30) -> None:
    """A cell whose figures are dropped: the JVM compiles the query's code before the cells that count."""
    measure_cell(bootstrap, "warm-up", mode, rate, start, seconds, 5)


def cells_json(cells: list[KafkaCell], **about: Any) -> str:
    """The cells and what the run was, as JSON."""
    return json.dumps({**about, "cells": [asdict(c) for c in cells]}, indent=2)
