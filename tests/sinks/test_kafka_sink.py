"""kafka:// as a sink — URI checked, records keyed by the output's natural key, connector and broker
checked before start, records written to the suite's own Kafka broker."""

import json
import socket
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from speedlayer.core.errors import ConfigError, EnvironmentProblem, SinkError
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.run_state import prepare_state
from speedlayer.runtime.settings import RunSettings
from speedlayer.sinks import open_sink
from speedlayer.sinks.base import AT_LEAST_ONCE, EXACTLY_ONCE, Target
from speedlayer.sinks.kafka_transactions import Transactions, marker_group
from speedlayer.sources import kafka_connector
from tests.servers import free_port


def test_uri_becomes_spark_options_and_secrets_are_masked():
    sink = open_sink("spark-kafka://k1:9093/fleet-alerts?kafka.compression.type=lz4&kafka.ssl.key.password=k3y")
    assert sink.guarantee == AT_LEAST_ONCE and sink.supports_continuous and sink.supports_realtime
    assert sink.spark_options() == {"kafka.bootstrap.servers": "k1:9093", "topic": "fleet-alerts",
                                    "kafka.compression.type": "lz4", "kafka.ssl.key.password": "k3y"}
    assert "k3y" not in sink.describe() and "kafka.ssl.key.password=***" in sink.describe()


def test_kafka_is_exactly_once_and_takes_librdkafka_settings():
    sink = open_sink("kafka://k1:9093/fleet-alerts?kafka.compression.type=lz4&kafka.ssl.key.password=k3y")
    assert sink.guarantee == EXACTLY_ONCE and sink.writes_batches
    assert not sink.supports_continuous and not sink.supports_realtime
    assert sink.settings == {"compression.type": "lz4", "ssl.key.password": "k3y"}
    assert "k3y" not in sink.describe()


@pytest.mark.parametrize("trigger,mode", [("continuous:1s", "continuous"), ("realtime:1min", "real-time")])
def test_continuous_and_realtime_runs_are_pointed_to_sparks_own_sink(trigger, mode):
    with pytest.raises(ConfigError, match=f"cannot take {mode} output .*use spark-kafka://") as err:
        plan_run(RunSettings(job="fleet", source="kafka://k1:9092/in", trigger=trigger, sinks={"alerts": "kafka://k1:9092/a"}))
    assert "\n" not in str(err.value)
    assert plan_run(RunSettings(job="fleet", source="kafka://k1:9092/in", trigger=trigger,
                                sinks={"alerts": "spark-kafka://k1:9092/a"})).queries


@pytest.mark.parametrize("uri,match", [
    ("kafka://k1:9092", "name one topic"),
    ("kafka://k1:9092/a,b", "name one topic"),
    ("kafka://k1:9092/t?topic=x", "takes retry_for, kafka.<producer setting> options only"),
    ("kafka://k1:9092/t?kafka.value.serializer=x", "values are written as JSON text"),
    ("kafka://k1:9092/t?kafka.bootstrap.servers=k2:9092", "give the brokers in the URI"),
    ("kafka://k1:9092/t?kafka.transactional.id=x", "names its transactions after the job, output and topic"),
    ("kafka://k1:9092/t?retry_for=soon", "invalid retry_for"),
    ("spark-kafka://k1:9092/t?topic=x", "takes kafka.<producer setting> options only"),
])
def test_bad_uris_are_one_line_config_errors(uri, match):
    with pytest.raises(ConfigError, match=match) as err:
        open_sink(uri)
    assert "\n" not in str(err.value)


def test_records_are_keyed_by_the_outputs_natural_key(spark):
    t0, t1 = datetime(2026, 11, 22, 10, 0, 0), datetime(2026, 11, 22, 10, 0, 10)
    windows = spark.createDataFrame([(t0, t1, "V1", 3, 42.5)],
                                    "window_start timestamp, window_end timestamp, vehicle_id string, events long, "
                                    "avg_speed_kmh double")
    sink = open_sink("spark-kafka://k1:9092/w")
    target = Target("fleet", "windows", "fleet_windows", key=("window_start", "window_end", "vehicle_id"))
    [record] = sink.records(windows, target).collect()
    key = json.loads(record.key)
    assert key["vehicle_id"] == "V1" and set(key) == {"window_start", "window_end", "vehicle_id"}
    assert json.loads(record.value) | {"window_start": None, "window_end": None} == {
        "window_start": None, "window_end": None, "vehicle_id": "V1", "events": 3, "avg_speed_kmh": 42.5}

    alerts = spark.createDataFrame([("e-000001", "V1", 99.0)], "event_id string, vehicle_id string, speed_kmh double")
    [alert] = sink.records(alerts, Target("fleet", "alerts", "fleet_alerts", key=("event_id",))).collect()
    assert alert.key == "e-000001" and json.loads(alert.value)["speed_kmh"] == 99.0


def test_an_unreachable_broker_is_reported_before_start(tmp_path):
    port = free_port()
    plan = plan_run(RunSettings(job="fleet", sinks={"alerts": f"kafka://127.0.0.1:{port}/alerts"},
                                state_dir=str(tmp_path / "st")))
    with pytest.raises(SinkError, match=f"no Kafka broker answers at 127.0.0.1:{port}: start one"):
        prepare_state(plan)


def test_two_outputs_cannot_share_a_topic():
    with pytest.raises(ConfigError, match="alerts"):
        plan_run(RunSettings(job="fleet", sinks={"alerts": "kafka://k1:9092/t", "windows": "kafka://k1:9092/t"}))


def test_the_runner_checks_the_connector_before_any_query(spark, monkeypatch, tmp_path):
    monkeypatch.setattr(kafka_connector, "DATA_SOURCE", f"kafka-absent-{uuid.uuid4().hex[:6]}")
    with socket.create_server(("127.0.0.1", 0)) as listener:  # answers the broker probe, nothing more
        port = listener.getsockname()[1]
        run = Run(spark, plan_run(RunSettings(job="fleet", sinks={"alerts": f"spark-kafka://127.0.0.1:{port}/alerts"},
                                              max_events=100, state_dir=str(tmp_path / "st"))))
        with pytest.raises(EnvironmentProblem, match="spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13"):
            run.start()
    assert run.queries == [] and not spark.streams.active


# --- exactly once, against the suite's broker; read back by confluent-kafka (tests/kafka_topics.py) ----

def _records(spark, rows: list[tuple[str, str]]):
    return spark.createDataFrame(rows, "key string, value string")


def _transactions(kafka, topic: str, **kw) -> Transactions:
    return Transactions(kafka.bootstrap, topic, marker_group("test", "out", topic), **kw)


def test_a_replayed_batch_is_skipped_by_this_writer_and_by_a_restarted_one(spark, kafka):
    topic = kafka.create()
    batch0 = _records(spark, [(f"k{i}", f'{{"n": {i}}}') for i in range(50)])
    batch1 = _records(spark, [("k50", '{"n": 50}')])
    write = _transactions(kafka, topic)
    write(batch0, 0)
    write(batch0, 0)                  # Spark replays a batch whose commit it did not record
    restarted = _transactions(kafka, topic)
    assert restarted.committed_batch() == 0
    restarted(batch0, 0)              # the same after a restart: the batch id was committed with the rows
    restarted(batch1, 1)
    keys = [r.key for r in kafka.read(topic)]
    assert sorted(keys) == sorted(f"k{i}" for i in range(51))


def test_a_batch_cut_off_before_its_commit_is_invisible_and_written_once_on_restart(spark, kafka):
    from confluent_kafka import Producer

    topic = kafka.create()
    rows = [(f"k{i}", f'{{"n": {i}}}') for i in range(20)]
    # A writer that dies mid-batch: its transaction holds the rows, never committed.
    crashed = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": marker_group("test", "out", topic)})
    crashed.init_transactions(30)
    crashed.begin_transaction()
    for key, value in rows[:10]:
        crashed.produce(topic, key=key, value=value)
    assert crashed.flush(30) == 0
    assert len(kafka.read(topic, committed_only=False)) == 10  # the rows are in the log...
    assert kafka.read(topic) == []                             # ...and no read_committed consumer sees them

    _transactions(kafka, topic)(_records(spark, rows), 0)  # the restarted run fences the dead one, then writes
    assert sorted(r.key for r in kafka.read(topic)) == sorted(k for k, _ in rows)
    assert len(kafka.read(topic, committed_only=False)) == 30


def test_a_record_over_the_size_limit_is_a_dead_letter_and_the_batch_goes_on(spark, kafka, tmp_path):
    from speedlayer.sinks.rejects import RejectStore

    topic = kafka.create()
    store = RejectStore(tmp_path / "rejected" / "out", "out")
    write = _transactions(kafka, topic, settings={"message.max.bytes": "20000"}, store=store, output="out")
    big = '{"blob": "' + "x" * 30_000 + '"}'
    write(_records(spark, [("small", '{"n": 1}'), ("big", big), ("small2", '{"n": 2}')]), 0)
    assert sorted(r.key for r in kafka.read(topic)) == ["small", "small2"]
    [(payload, reason, key)] = write.last_refused
    assert key == "big" and "message.max.bytes (20,000)" in reason and payload == big
    assert any(store.folder.iterdir())


def test_a_fresh_run_into_a_topic_another_run_wrote_is_refused(spark, kafka, tmp_path):
    topic = kafka.create()
    first = Transactions(kafka.bootstrap, topic, marker_group("fleet", "alerts", topic))
    first(_records(spark, [("a", "{}")]), 0)
    sink = open_sink(f"kafka://{kafka.bootstrap}/{topic}")
    sink.check("alerts", fresh_checkpoint=True)
    group = marker_group("fleet", "alerts", topic)
    with pytest.raises(SinkError, match=f"already holds batches of another run .*--group {group}"):
        sink.batch_function(None, Target("fleet", "alerts", "fleet_alerts", key=("event_id",), fresh_checkpoint=True))
    sink.batch_function(None, Target("fleet", "alerts", "fleet_alerts", key=("event_id",)))  # the same run, resumed


def test_kafka_to_kafka_alerts_arrive_once_each_as_the_oracle_says(spark, kafka, tmp_path, run_cli):
    from tests import oracle

    source, out = kafka.create(prefix="fastcars"), kafka.create(prefix="alerts")
    start = (datetime.now(timezone.utc) - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:00Z")
    produced = run_cli("produce", "--to", f"kafka://{kafka.bootstrap}/{source}", "--max-events", "3000", "--rate", "0",
                       "--generator", "generator://?seed=11&late=0&rate=200&vehicles=50", "--start", start, "--no-progress")
    assert produced.returncode == 0, produced.stderr[-2000:]
    inputs = kafka.read(source)
    assert len(inputs) == 3000 and {r.partition for r in inputs} == {0, 1}  # keyed by vehicle, spread over both
    expected = oracle.alerts(oracle.kafka_pings(inputs))
    assert expected

    run = Run(spark, plan_run(RunSettings(job="fleet", source=f"kafka://{kafka.bootstrap}/{source}?startingOffsets=earliest",
                                          sinks={"alerts": f"kafka://{kafka.bootstrap}/{out}"}, trigger="available-now",
                                          state_dir=str(tmp_path / "st"))))
    summary = run.start_and_wait()
    assert [q.guarantee for q in summary.queries] == [EXACTLY_ONCE]
    written = kafka.read(out)
    assert sorted(r.key for r in written) == sorted(expected)  # each alert once, none missing, none extra
    assert {r.key: round(json.loads(r.value)["excess_kmh"], 1) for r in written} == expected
