"""kafka:// — URI and options checked before start, the missing connector named exactly, reads through Spark's connector.

The read tests need Spark's Kafka connector in the session and a broker on localhost:9092; without
them they skip, saying which is missing (the only tests allowed to skip under CI=true: the
connector cannot be downloaded here). To run them, give the test session the connector, e.g.
``PYSPARK_SUBMIT_ARGS="--packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.3.0 pyspark-shell"``.
"""

import json
import uuid

import pytest

from speedlayer.core.errors import ConfigError, EnvironmentProblem, SourceError
from speedlayer.core.schemas import RAW_SCHEMA, VEHICLE_EVENT
from speedlayer.core.uris import Uri
from speedlayer.decode.validate import decode
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.settings import RunSettings
from speedlayer.sources import kafka, open_source
from tests.servers import free_port, port_open

BROKER = ("localhost", 9092)


def test_uri_and_options_become_spark_options():
    source = open_source("kafka://k1:9093/telemetry?startingOffsets=earliest&failOnDataLoss=false"
                         "&maxOffsetsPerTrigger=500&kafka.security.protocol=SASL_SSL&kafka.sasl.mechanism=PLAIN")
    assert source.spark_options() == {
        "kafka.bootstrap.servers": "k1:9093", "subscribe": "telemetry", "startingOffsets": "earliest",
        "failOnDataLoss": "false", "maxOffsetsPerTrigger": "500",
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"}
    assert source.supports_realtime and source.supports_continuous and source.fault_tolerant


def test_defaults_port_and_snake_case_spellings():
    source = open_source("kafka://localhost/a,b?starting_offsets=earliest")
    assert source.brokers == ["localhost:9092"] and source.topics == ["a", "b"]
    assert source.spark_options()["startingOffsets"] == "earliest"
    assert source.spark_options()["failOnDataLoss"] == "true"


def test_several_brokers():
    # parse_uri cannot take a comma-separated netloc yet, so the Uri is built by hand here.
    text = "kafka://k1:9092,k2:9093/t"
    source = kafka.KafkaSource(Uri(text=text, scheme="kafka", host="k1", port=None, path="/t"))
    assert source.spark_options()["kafka.bootstrap.servers"] == "k1:9092,k2:9093"


def test_secrets_are_masked_in_describe():
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="s3cret";'
    from urllib.parse import quote

    source = open_source(f"kafka://k1:9092/t?kafka.sasl.jaas.config={quote(jaas)}&kafka.ssl.key.password=k3y"
                         "&kafka.security.protocol=SASL_SSL")
    text = source.describe()
    assert "s3cret" not in text and "k3y" not in text
    assert "kafka.sasl.jaas.config=***" in text and "kafka.security.protocol=SASL_SSL" in text
    assert source.spark_options()["kafka.sasl.jaas.config"] == jaas


@pytest.mark.parametrize("uri,match", [
    ("kafka://k1:9092", "name the topic"),
    ("kafka://k1:9092/bad topic", "name the topic"),
    ("kafka://user:pw@k1:9092/t", "put Kafka credentials in kafka.sasl.jaas.config"),
    ("kafka://k1:9092/t?startingOffsets=first", "option 'starting_offsets'"),
    ("kafka://k1:9092/t?maxOffsetsPerTrigger=0", "option 'max_offsets_per_trigger'"),
    ("kafka://k1:9092/t?subscribe=x", "has no option 'subscribe'"),
    ("kafka://k1:9092/t?kafka.auto.offset.reset=earliest", "use startingOffsets=earliest or latest"),
    ("kafka://k1:9092/t?kafka.bootstrap.servers=k2:9092", "give the brokers in the URI"),
])
def test_bad_uris_are_one_line_config_errors(uri, match):
    with pytest.raises(ConfigError, match=match) as err:
        open_source(uri)
    assert "\n" not in str(err.value)


def test_unreachable_brokers_are_reported_before_start():
    port = free_port()
    with pytest.raises(SourceError, match=f"no Kafka broker answers at 127.0.0.1:{port}"):
        open_source(f"kafka://127.0.0.1:{port}/t").check()


def test_realtime_is_planned_for_kafka_only_in_update_mode():
    p = plan_run(RunSettings(job="fleet", source="kafka://localhost:9092/t", trigger="realtime:1min",
                             sinks={"dead-letters": "console:"}))
    assert p.trigger.realtime and [q.mode for q in p.queries] == ["update"]


def test_missing_connector_names_exactly_what_to_add(spark, monkeypatch):
    import pyspark

    # Look up a data source that surely is absent, so this runs whether or not the connector is installed.
    monkeypatch.setattr(kafka, "DATA_SOURCE", f"kafka-absent-{uuid.uuid4().hex[:6]}")
    with pytest.raises(EnvironmentProblem) as err:
        open_source("kafka://localhost:9092/t").check_session(spark)
    message = str(err.value)
    assert "\n" not in message
    assert f"--conf spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}" in message
    assert f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar" in message and "kafka-clients" in message


def test_this_session_is_told_about_the_connector(spark):
    present = kafka.connector_present(spark)
    assert present in (True, False)
    if not present:
        with pytest.raises(EnvironmentProblem, match="Kafka connector is not in this Spark session"):
            open_source("kafka://localhost:9092/t").check_session(spark)


# --- reads through Spark's connector (skip without connector or broker) ------------------------

@pytest.fixture
def topic(spark):
    if not kafka.connector_present(spark):
        pytest.skip(f"Spark's Kafka connector is not in the test session: add {kafka.connector_hint()}")
    if not port_open(*BROKER):
        pytest.skip(f"no Kafka broker on {BROKER[0]}:{BROKER[1]}")
    from confluent_kafka import Producer

    name = f"speedlayer-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": f"{BROKER[0]}:{BROKER[1]}"})
    good = {"event_id": "a", "vehicle_id": "V1", "event_time": "2026-11-01T10:00:01Z", "speed_kmh": 40.0,
            "lat": 52.6, "lon": 13.1}
    producer.produce(name, key=b"V1", value=json.dumps(good).encode())
    producer.produce(name, key=b"V2", value=b"{not json")
    producer.flush(30)
    return name


def test_records_are_read_and_decoded(spark, topic, tmp_path):
    source = open_source(f"kafka://{BROKER[0]}:{BROKER[1]}/{topic}?startingOffsets=earliest")
    raw = source.read_stream(spark)
    assert [(f.name, f.dataType) for f in raw.schema] == [(f.name, f.dataType) for f in RAW_SCHEMA]
    query = (raw.writeStream.format("memory").queryName("kafka_raw").trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    query.awaitTermination(120)
    rows = sorted(spark.table("kafka_raw").collect(), key=lambda r: r.offset)
    assert [(r.key, r.offset) for r in rows] == [("V1", "0/0"), ("V2", "0/1")]
    assert all(r.ingest_time is not None for r in rows)
    decoded = decode(spark.table("kafka_raw"), VEHICLE_EVENT)
    assert [e.event_id for e in decoded.events.collect()] == ["a"]
    assert [(d.key, d.reason) for d in decoded.dead_letters.collect()] == [("V2", "malformed JSON: not a JSON object")]
    assert source.read_batch(spark).count() == 2


def test_the_runner_checks_the_connector_before_any_query(spark, monkeypatch, tmp_path):
    import socket

    from speedlayer.runtime.run import Run

    monkeypatch.setattr(kafka, "DATA_SOURCE", f"kafka-absent-{uuid.uuid4().hex[:6]}")
    with socket.create_server(("127.0.0.1", 0)) as listener:  # answers the broker probe, nothing more
        port = listener.getsockname()[1]
        run = Run(spark, plan_run(RunSettings(job="fleet", source=f"kafka://127.0.0.1:{port}/t",
                                              sinks={"alerts": "memory:kafka_alerts"}, state_dir=str(tmp_path / "st"))))
        with pytest.raises(EnvironmentProblem, match="spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13"):
            run.start()
    assert run.queries == [] and not spark.streams.active
