"""kafka:// as a sink — URI checked, records keyed by the output's natural key, connector and broker checked before start.

Writing through Spark's Kafka sink needs the connector and a broker on localhost:9092: without
them that test skips, saying which is missing (the connector cannot be downloaded here).
"""

import json
import socket
import uuid
from datetime import datetime

import pytest

from speedlayer.core.errors import ConfigError, EnvironmentProblem, SinkError
from speedlayer.runtime.plan import plan_run, prepare_state
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from speedlayer.sinks import open_sink
from speedlayer.sinks.base import AT_LEAST_ONCE, Target
from speedlayer.sources import kafka
from tests.servers import free_port, port_open

BROKER = ("localhost", 9092)


def test_uri_becomes_spark_options_and_secrets_are_masked():
    sink = open_sink("kafka://k1:9093/fleet-alerts?kafka.compression.type=lz4&kafka.ssl.key.password=k3y")
    assert sink.guarantee == AT_LEAST_ONCE and sink.supports_continuous
    assert sink.spark_options() == {"kafka.bootstrap.servers": "k1:9093", "topic": "fleet-alerts",
                                    "kafka.compression.type": "lz4", "kafka.ssl.key.password": "k3y"}
    assert "k3y" not in sink.describe() and "kafka.ssl.key.password=***" in sink.describe()


@pytest.mark.parametrize("uri,match", [
    ("kafka://k1:9092", "name one topic"),
    ("kafka://k1:9092/a,b", "name one topic"),
    ("kafka://k1:9092/t?topic=x", "takes kafka.<producer setting> options only"),
    ("kafka://k1:9092/t?kafka.value.serializer=x", "values are written as JSON text"),
    ("kafka://k1:9092/t?kafka.bootstrap.servers=k2:9092", "give the brokers in the URI"),
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
    sink = open_sink("kafka://k1:9092/w")
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
    monkeypatch.setattr(kafka, "DATA_SOURCE", f"kafka-absent-{uuid.uuid4().hex[:6]}")
    with socket.create_server(("127.0.0.1", 0)) as listener:  # answers the broker probe, nothing more
        port = listener.getsockname()[1]
        run = Run(spark, plan_run(RunSettings(job="fleet", sinks={"alerts": f"kafka://127.0.0.1:{port}/alerts"},
                                              max_events=100, state_dir=str(tmp_path / "st"))))
        with pytest.raises(EnvironmentProblem, match="spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13"):
            run.start()
    assert run.queries == [] and not spark.streams.active


def test_alerts_are_written_to_a_topic(spark, tmp_path):
    if not kafka.connector_present(spark):
        pytest.skip(f"Spark's Kafka connector is not in the test session: add {kafka.connector_hint()}")
    if not port_open(*BROKER):
        pytest.skip(f"no Kafka broker on {BROKER[0]}:{BROKER[1]}")
    topic = f"speedlayer-{uuid.uuid4().hex[:8]}"
    run = Run(spark, plan_run(RunSettings(job="fleet", source="generator://?seed=7&start=0&late=0&malformed=0",
                                          sinks={"alerts": f"kafka://{BROKER[0]}:{BROKER[1]}/{topic}"},
                                          max_events=5_000, state_dir=str(tmp_path / "st"))))
    run.start_and_wait()
    records = (spark.read.format("kafka").option("kafka.bootstrap.servers", f"{BROKER[0]}:{BROKER[1]}")
               .option("subscribe", topic).option("startingOffsets", "earliest").load())
    keys = [r.key.decode() for r in records.select("key").collect()]
    assert keys and len(keys) == len(set(keys)) and all(k.startswith("e-") for k in keys)
