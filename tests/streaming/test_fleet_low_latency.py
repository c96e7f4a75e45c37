"""The stateless alerts query in Spark's continuous mode on the generator into memory, and in continuous and
real-time mode from a Kafka topic into another through Spark's own Kafka sink, read back by a plain consumer."""

import json
import time
from datetime import datetime, timedelta, timezone

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from speedlayer.core.errors import ConfigError
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from speedlayer.runtime.summary import RunSummary
from speedlayer.sinks.base import AT_LEAST_ONCE
from tests import oracle
from tests.helpers import batch_output

START = "2026-11-22T10:00:00Z"
# One partition: the continuous task holds one of the session's two cores for good, and reading
# the memory table needs the other.
SOURCE = f"generator://?seed=5&start={START}&rate=400&vehicles=40&late=0&duplicates=0&malformed=0.01&partitions=1"


def _run_until(spark, settings: RunSettings, arrived, what: str, timeout_s: float) -> tuple[RunSummary, str]:
    """Run until ``arrived()`` (these queries have no batches to wait for: poll what they wrote), then stop;
    the summary, and the query's optimized plan as it ran."""
    run = Run(spark, plan_run(settings))
    run.start()
    try:
        deadline = time.monotonic() + timeout_s
        while not arrived():
            assert run.queries[0].exception() is None
            assert time.monotonic() < deadline, f"not {what} within {timeout_s:.0f} s"
            run.queries[0].awaitTermination(0.5)
        plan = run.queries[0]._jsq.streamingQuery().lastExecution().optimizedPlan().toString()
    finally:
        run.stop_requested.set()
        summary = run.wait()
    return summary, plan


def test_continuous_alerts_equal_the_batch_alerts_of_the_same_events(spark, tmp_path):
    s = RunSettings(job="fleet", source=SOURCE, trigger="continuous:1s", state_dir=str(tmp_path / "state"),
                    sinks={"alerts": "memory:cont_alerts"})
    summary, _ = _run_until(spark, s, lambda: spark.table("cont_alerts").count() >= 20, "20 alerts", 120)
    assert summary.stopped_by == "stop requested"

    streamed = spark.table("cont_alerts")
    # One ordered partition: the epochs committed so far hold a prefix of the events.
    last = streamed.select(F.max(F.expr("int(substring(event_id, 3))"))).first()[0]
    expected = (batch_output(spark, s.model_copy(update={"max_events": last + 1, "trigger": "available-now"}), "alerts")
                .where(F.expr("int(substring(event_id, 3))") <= last))
    assert expected.count() >= 20
    assertDataFrameEqual(streamed, expected)


def test_continuous_refuses_max_events():
    s = RunSettings(job="fleet", source=SOURCE, trigger="continuous:1s", max_events=100, sinks={"alerts": "memory:x"})
    with pytest.raises(ConfigError, match="--duration"):
        plan_run(s)


@pytest.mark.parametrize("trigger", ["continuous:1s", "realtime:5s"])
def test_low_latency_alerts_from_kafka_into_kafka_are_the_oracles(trigger, spark, kafka, tmp_path):
    source, out = kafka.create(prefix="fastcars"), kafka.create(prefix="alerts")
    start = datetime.now(timezone.utc) - timedelta(minutes=10)
    pings = [(f"V{i % 30:04d}", json.dumps({
        "event_id": f"e-{i:06d}", "vehicle_id": f"V{i % 30:04d}", "speed_kmh": 20.0 + i * 7 % 110,
        "event_time": (start + timedelta(milliseconds=100 * i)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "lat": 52.45 + (i % 17) / 100, "lon": 13.3 + (i % 23) / 100})) for i in range(2_000)]
    kafka.produce(source, pings + [("V0000", "not json")])
    inputs = kafka.read(source)
    expected = oracle.alerts(oracle.kafka_pings(inputs))
    assert len(expected) > 100

    # one core per source partition: the topic's two hold the session's two for as long as the query runs
    s = RunSettings(job="fleet", trigger=trigger, state_dir=str(tmp_path / "state"),
                    source=f"kafka://{kafka.bootstrap}/{source}?startingOffsets=earliest",
                    sinks={"alerts": f"spark-kafka://{kafka.bootstrap}/{out}"})
    summary, plan = _run_until(spark, s, lambda: len({r.key for r in kafka.read(out)}) >= len(expected), "every alert",
                               180)
    # The speed filter reads the decoded columns: pushed into the decode, it would parse the JSON again for
    # each field it reads, row by row (no watermark or dedup stands between them in these modes)
    filters = [line for line in plan.splitlines() if line.lstrip("+-:~ ").startswith("Filter")]
    assert any("speed_limit" in f or "_t_speed_kmh" in f for f in filters), plan[:2000]
    assert not any("from_json" in f for f in filters)
    assert spark.conf.get("spark.sql.optimizer.excludedRules", None) is None  # the session's own settings as they were
    assert [q.guarantee for q in summary.queries] == [AT_LEAST_ONCE]
    if trigger.startswith("continuous"):  # Spark reports no progress there: the summary counts the epochs committed
        assert summary.queries[0].batches >= 1 and summary.queries[0].input_rows is None

    written = kafka.read(out)
    assert {r.key for r in written} == set(expected)  # at least once: a restart could repeat one, none is missing
    assert {r.key: round(json.loads(r.value)["excess_kmh"], 1) for r in written} == expected


@pytest.mark.parametrize("trigger", ["continuous:1s", "realtime:5s"])
def test_a_topic_with_more_partitions_than_cores_is_refused_before_start(trigger, spark, kafka, tmp_path):
    """Four partitions on two cores: two tasks would wait for the cores the other two hold, silently
    (continuous mode delivers nothing; real-time mode reads two of the partitions)."""
    source = kafka.create(partitions=4, prefix="fastcars")
    s = RunSettings(job="fleet", trigger=trigger, state_dir=str(tmp_path / "state"),
                    source=f"kafka://{kafka.bootstrap}/{source}?startingOffsets=earliest",
                    sinks={"alerts": f"spark-kafka://{kafka.bootstrap}/{kafka.create(prefix='alerts')}"})
    run = Run(spark, plan_run(s))
    with pytest.raises(ConfigError, match=rf"{source} has 4: each query here has 2 core\(s\): give each query 4"):
        run.start()
    run.cleanup()
    assert spark.streams.active == []
