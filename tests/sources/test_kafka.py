"""kafka:// — URI and options checked before start, the missing connector named exactly, reads through
Spark's connector from the suite's own Kafka broker (tests/local_servers.py)."""

import json
import uuid

import pytest

from speedlayer.core.errors import ConfigError, EnvironmentProblem, SourceError
from speedlayer.core.schemas import RAW_SCHEMA
from speedlayer.core.uris import Uri
from speedlayer.decode.validate import decode
from speedlayer.pipelines.fleet.schemas import VEHICLE_EVENT
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.settings import RunSettings
from speedlayer.sources import kafka as kafka_source
from speedlayer.sources import kafka_connector, open_source
from tests.servers import free_port


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
    source = kafka_source.KafkaSource(Uri(text=text, scheme="kafka", host="k1", port=None, path="/t"))
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
    ("kafka://k1:9092/t?startingOffset=earliest", r"no option 'starting_offset' \(did you mean 'starting_offsets'\?\)"),
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


def test_a_topic_the_broker_does_not_hold_is_named_before_start(kafka, tmp_path):
    from speedlayer.runtime.run_state import prepare_state

    held = kafka.create(partitions=1)
    missing = f"{held}_typo"
    settings = RunSettings(job="fleet", source=f"kafka://{kafka.bootstrap}/{held},{missing}",
                           sinks={"alerts": f"parquet:{tmp_path / 'out'}"}, state_dir=str(tmp_path / "st"))
    with pytest.raises(SourceError, match=f"Kafka at {kafka.bootstrap} has no topic {missing}: fix the name .*"
                                          f"speedlayer produce --to kafka://{kafka.bootstrap}/{missing} creates it"):
        prepare_state(plan_run(settings))
    assert missing not in kafka.names()  # asking did not create it


def test_realtime_is_planned_for_kafka_only_in_update_mode():
    p = plan_run(RunSettings(job="fleet", source="kafka://localhost:9092/t", trigger="realtime:1min",
                             sinks={"dead-letters": "console:"}))
    assert p.trigger.realtime and [q.mode for q in p.queries] == ["update"]


def test_missing_connector_names_exactly_what_to_add(spark, monkeypatch):
    import pyspark

    # Look up a data source that surely is absent, so this runs whether or not the connector is installed.
    monkeypatch.setattr(kafka_connector, "DATA_SOURCE", f"kafka-absent-{uuid.uuid4().hex[:6]}")
    with pytest.raises(EnvironmentProblem) as err:
        open_source("kafka://localhost:9092/t").check_session(spark)
    message = str(err.value)
    assert "\n" not in message
    assert f"--conf spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}" in message
    assert f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar" in message and "kafka-clients" in message


def test_the_test_session_has_the_connector_as_a_run_adds_it(spark):
    assert kafka_connector.connector_present(spark) is True
    open_source("kafka://localhost:9092/t").check_session(spark)


def test_a_kafka_run_asks_for_the_connector_of_this_pyspark():
    import pyspark

    p = plan_run(RunSettings(job="fleet", source="kafka://localhost:9092/t", sinks={"alerts": "kafka://localhost:9092/a"}))
    assert p.spark_packages() == [f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"]
    assert plan_run(RunSettings(job="fleet")).spark_packages() == []


# --- reads through Spark's connector from the suite's broker ------------------------------------

@pytest.fixture
def topic(kafka_topic):
    """A topic holding one good event and one malformed record, both in partition 0."""
    from confluent_kafka import Producer

    bootstrap, name = kafka_topic
    producer = Producer({"bootstrap.servers": bootstrap})
    good = {"event_id": "a", "vehicle_id": "V1", "event_time": "2026-11-01T10:00:01Z", "speed_kmh": 40.0,
            "lat": 52.6, "lon": 13.1}
    producer.produce(name, key=b"V1", value=json.dumps(good).encode(), partition=0)
    producer.produce(name, key=b"V2", value=b"{not json", partition=0)
    assert producer.flush(30) == 0
    return bootstrap, name


def test_records_are_read_and_decoded(spark, topic, tmp_path):
    bootstrap, name = topic
    source = open_source(f"kafka://{bootstrap}/{name}?startingOffsets=earliest")
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


def test_the_dashboards_view_reads_as_many_of_the_runs_batches_as_asked(spark, kafka_topic, tmp_path):
    from confluent_kafka import Producer

    bootstrap, name = kafka_topic
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(30):
        producer.produce(name, key=f"V{i}".encode(), value=b"{}", partition=0)
    assert producer.flush(30) == 0
    source = open_source(f"kafka://{bootstrap}/{name}?startingOffsets=earliest&maxOffsetsPerTrigger=4")

    def batch_sizes(raw, label: str) -> list[int]:
        sizes: list[int] = []
        query = (raw.writeStream.trigger(availableNow=True).option("checkpointLocation", str(tmp_path / label))
                 .foreachBatch(lambda batch, _id: sizes.append(batch.count())).start())
        query.awaitTermination(120)
        return [n for n in sizes if n]

    assert batch_sizes(source.read_stream(spark), "run") == [4] * 7 + [2]
    assert batch_sizes(source.view_stream(spark, batches=3), "view") == [12, 12, 6]


def test_the_runner_checks_the_connector_before_any_query(spark, monkeypatch, tmp_path):
    import socket

    from speedlayer.runtime.run import Run

    monkeypatch.setattr(kafka_connector, "DATA_SOURCE", f"kafka-absent-{uuid.uuid4().hex[:6]}")
    already = {q.id for q in spark.streams.active}  # an earlier test's in this session's process, if any
    with socket.create_server(("127.0.0.1", 0)) as listener:  # answers the broker probe, nothing more
        port = listener.getsockname()[1]
        run = Run(spark, plan_run(RunSettings(job="fleet", source=f"kafka://127.0.0.1:{port}/t",
                                              sinks={"alerts": "memory:kafka_alerts"}, state_dir=str(tmp_path / "st"))))
        with pytest.raises(EnvironmentProblem, match="spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13"):
            run.start()
    assert run.queries == [] and not [q for q in spark.streams.active if q.id not in already]


def test_each_committed_batch_reaches_a_consumer_group_and_metrics_show_lag_per_partition(spark, kafka, tmp_path,
                                                                                         run_cli):
    from confluent_kafka import Consumer, TopicPartition
    from prometheus_client import generate_latest

    from speedlayer.monitor.prometheus import metrics_registry
    from speedlayer.runtime.run import Run

    topic = kafka.create(partitions=2)
    events = [json.dumps({"event_id": f"e{i}", "vehicle_id": f"V{i % 7}", "event_time": "2026-11-01T10:00:01Z",
                          "speed_kmh": 40.0, "lat": 52.6, "lon": 13.1}) for i in range(60)]
    kafka.produce(topic, [(f"V{i % 7}", e) for i, e in enumerate(events[:40])], partition=0)
    kafka.produce(topic, [(f"V{i % 7}", e) for i, e in enumerate(events[40:])], partition=1)
    run = Run(spark, plan_run(RunSettings(
        job="fleet", source=f"kafka://{kafka.bootstrap}/{topic}?startingOffsets=earliest&maxOffsetsPerTrigger=25",
        sinks={"alerts": f"memory:lag_{uuid.uuid4().hex[:6]}"}, trigger="available-now", state_dir=str(tmp_path / "st"))))
    run.start_and_wait()
    [query] = [qp.name for qp in run.plan.queries]

    group = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": kafka_source.lag_group(query)})
    try:
        committed = group.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
    finally:
        group.close()
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 40), (1, 20)]

    kafka.produce(topic, [("V1", events[0])] * 3, partition=1)  # three more, not read: Spark's latest offsets
    run.tracker.record({**run.tracker.get(query).history[-1],
                        "sources": [{**run.tracker.get(query).sources[0],
                                     "latestOffset": {topic: {"0": 40, "1": 23}}}]})
    text = generate_latest(metrics_registry("fleet", run.tracker)).decode()
    lag = 'speedlayer_source_partition_lag_entries{{partition="{}",query="{}",speedlayer_job="fleet",topic="{}"}} {}'
    assert lag.format(1, query, topic, 3.0) in text and lag.format(0, query, topic, 0.0) in text
    from speedlayer.monitor.dashboard import run_state

    [shown] = run_state(run, None)["queries"]  # what the dashboard's source lag tile lists
    assert shown["partition_lag"] == {f"{topic}/0": 0, f"{topic}/1": 3}
    status = run_cli("status", "--state-dir", str(tmp_path / "st"), "--no-operators")
    assert status.returncode == 0, status.stderr
    assert f"Kafka lag (records beyond the last committed batch): {topic}/0 0, {topic}/1 3" in status.stdout


def _pings(n: int, start: int = 0) -> list[tuple[str, str]]:
    return [(f"V{i % 3}", json.dumps({"event_id": f"e{i}", "vehicle_id": f"V{i % 3}", "event_time": "2026-11-01T10:00:01Z",
                                      "speed_kmh": 140.0, "lat": 52.6, "lon": 13.1})) for i in range(start, start + n)]


def _alert_ids(spark, path) -> list[str]:
    return sorted(r.event_id for r in spark.read.parquet(str(path)).select("event_id").collect())


def test_records_deleted_before_they_were_read_are_named_and_the_loss_can_be_accepted(spark, kafka, tmp_path):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from speedlayer.core.errors import QueryFailedError
    from speedlayer.runtime.run import Run

    topic = kafka.create(partitions=1)
    kafka.produce(topic, _pings(10))
    uri = f"kafka://{kafka.bootstrap}/{topic}?startingOffsets=earliest"

    def run(source: str) -> None:
        Run(spark, plan_run(RunSettings(job="fleet", source=source, sinks={"alerts": f"parquet:{tmp_path / 'out'}"},
                                        trigger="available-now", state_dir=str(tmp_path / "st"),
                                        allow_changed_settings=True))).start_and_wait()

    run(uri)
    kafka.produce(topic, _pings(30, 10))
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 30)]).values():  # retention took 10..29 unread
        future.result(30)
    with pytest.raises(QueryFailedError) as err:
        run(uri)
    message = str(err.value)
    assert f"Kafka topic {topic} partition 0: records at offsets 10 to 39 were deleted before this run read them" in message
    assert "add failOnDataLoss=false to the kafka:// URI and run again with --allow-changed-settings" in message
    assert "\n" not in message
    run(uri + "&failOnDataLoss=false")  # accepted: what is still there is read, once
    assert _alert_ids(spark, tmp_path / "out") == sorted([f"e{i}" for i in range(10)] + [f"e{i}" for i in range(30, 40)])


def test_a_topic_deleted_and_recreated_between_runs_is_named(spark, kafka, tmp_path):
    from speedlayer.core.errors import QueryFailedError
    from speedlayer.runtime.run import Run

    topic = kafka.create(partitions=1)
    kafka.produce(topic, _pings(40))
    settings = RunSettings(job="fleet", source=f"kafka://{kafka.bootstrap}/{topic}?startingOffsets=earliest",
                           sinks={"alerts": f"parquet:{tmp_path / 'out'}"}, trigger="available-now",
                           state_dir=str(tmp_path / "st"))
    Run(spark, plan_run(settings)).start_and_wait()
    kafka.delete(topic)
    kafka.recreate(topic, partitions=1)
    kafka.produce(topic, _pings(5, 100))
    with pytest.raises(QueryFailedError, match=f"Kafka topic {topic} partition 0 now ends at offset 5, before offset 40 "
                                               "this run had read up to: the topic was deleted and recreated"):
        Run(spark, plan_run(settings)).start_and_wait()


@pytest.mark.timeout(300)
def test_a_topic_deleted_and_recreated_under_a_running_job_is_named(spark, kafka, tmp_path):
    import re
    import threading
    import time

    from speedlayer.core.errors import QueryFailedError
    from speedlayer.runtime.run import Run

    topic = kafka.create(partitions=1)
    kafka.produce(topic, _pings(40))
    run = Run(spark, plan_run(RunSettings(job="fleet", source=f"kafka://{kafka.bootstrap}/{topic}?startingOffsets=earliest",
                                          sinks={"alerts": f"parquet:{tmp_path / 'out'}"}, trigger="processing:1s",
                                          state_dir=str(tmp_path / "st"))))
    run.start()
    outcome: list[BaseException | None] = []
    waiter = threading.Thread(target=lambda: outcome.append(_raised(run.wait)), daemon=True)
    waiter.start()
    deadline = time.monotonic() + 120
    while not (tmp_path / "st" / "checkpoints" / "alerts" / "commits" / "0").exists():
        assert time.monotonic() < deadline and not outcome, f"no first batch: {outcome}"
        time.sleep(0.2)
    assert _alert_ids(spark, tmp_path / "out") == sorted(f"e{i}" for i in range(40))
    kafka.delete(topic)  # under the running job, then back with fewer records than it had read
    kafka.recreate(topic, partitions=1)
    kafka.produce(topic, _pings(5, 100))
    waiter.join(120)
    assert outcome, "the run went on reading a recreated topic"
    error = outcome[0]
    assert isinstance(error, QueryFailedError), error
    # Which of Spark's two reports comes depends on whether a trigger fell between the delete and the
    # recreate: the partition gone, or its offsets gone back. Both name the topic, partition and the fix.
    message = str(error)
    assert re.search(f"Kafka topic {topic} partition 0 (now ends at offset 5, before offset 40|was deleted while this "
                     "run was reading it)", message), message
    assert "add failOnDataLoss=false to the kafka:// URI" in message and "\n" not in message


def _raised(call) -> BaseException | None:
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 — handed to the test's thread
        return exc
    return None


def test_client_settings_kafka_refuses_are_one_line_naming_the_setting(spark, kafka, tmp_path):
    from speedlayer.core.errors import QueryFailedError
    from speedlayer.runtime.run import Run

    topic = kafka.create(partitions=1)
    kafka.produce(topic, _pings(3))
    settings = RunSettings(job="fleet", source=f"kafka://{kafka.bootstrap}/{topic}?startingOffsets=earliest"
                                               "&kafka.default.api.timeout.ms=1000",  # below request.timeout.ms
                           sinks={"alerts": f"parquet:{tmp_path / 'out'}"}, trigger="available-now",
                           state_dir=str(tmp_path / "st"))
    with pytest.raises(QueryFailedError) as err:
        Run(spark, plan_run(settings)).start_and_wait()
    message = str(err.value)
    assert "Kafka's client refused the kafka. settings of the source: " in message and "default.api.timeout.ms" in message
    assert message.endswith("fix the kafka.<setting> options of the kafka:// URI") and "\n" not in message
