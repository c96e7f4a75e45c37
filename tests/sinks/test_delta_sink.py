"""delta: — Delta Lake appends once per batch id, a fresh run into another run's table is refused, and a Spark
without a Delta release is refused before start."""

import dataclasses

import pytest

from speedlayer.core.errors import ConfigError, SinkError
from speedlayer.sinks import open_sink
from speedlayer.sinks.base import EXACTLY_ONCE, Target
from speedlayer.sinks.delta import app_id


def test_uri_guarantee_and_the_jar_a_run_adds(tmp_path):
    import pyspark

    sink = open_sink(f"delta:{tmp_path / 'alerts'}")
    assert sink.guarantee == EXACTLY_ONCE and sink.writes_batches and sink.modes == ("append",)
    major_minor = ".".join(pyspark.__version__.split(".")[:2])
    assert sink.spark_packages() == [f"io.delta:delta-spark_{major_minor}_2.13:4.4.0"]
    with pytest.raises(ConfigError, match="has no option 'x'"):
        open_sink(f"delta:{tmp_path}?x=1")


def test_the_session_rebuilds_delta_snapshots_in_a_task_per_core_unless_told_otherwise(spark, tmp_path):
    import os

    from speedlayer.runtime.session import add_connector_conf

    needed = open_sink(f"delta:{tmp_path / 'alerts'}").spark_conf()
    per_core = str(max(2, os.cpu_count() or 2))
    assert add_connector_conf({}, needed)["spark.databricks.delta.snapshotPartitions"] == per_core
    assert add_connector_conf({"spark.databricks.delta.snapshotPartitions": "64"},
                              needed)["spark.databricks.delta.snapshotPartitions"] == "64"
    assert spark.conf.get("spark.databricks.delta.snapshotPartitions") == per_core  # the suite's session, as a run's


def test_a_spark_no_delta_release_is_built_for_is_refused_in_one_line(monkeypatch, tmp_path):
    import pyspark

    monkeypatch.setattr(pyspark, "__version__", "4.3.0")
    with pytest.raises(ConfigError, match=r"no Delta Lake release is built for Spark 4.3.0: .*Spark 4.2 \(Delta 4.4.0\)"):
        open_sink(f"delta:{tmp_path / 't'}")


def test_a_replayed_batch_is_appended_once_and_a_fresh_run_is_refused(spark, tmp_path):
    path = tmp_path / "alerts"
    sink = open_sink(f"delta:{path}")
    target = Target("fleet", "alerts", "fleet_alerts", key=("event_id",), fresh_checkpoint=True)
    sink.check("alerts", fresh_checkpoint=True)
    write = sink.batch_function(None, target)
    batch0 = spark.createDataFrame([("e1", 90.0), ("e2", 95.0)], "event_id string, speed_kmh double")
    batch1 = spark.createDataFrame([("e3", 99.0)], "event_id string, speed_kmh double")
    write(batch0, 0)
    write(batch0, 0)  # Spark replays a batch whose commit it did not record: Delta skips the version it holds
    write(batch1, 1)
    write(batch1, 1)
    rows = spark.read.format("delta").load(str(path)).collect()
    assert sorted(r.event_id for r in rows) == ["e1", "e2", "e3"]
    with pytest.raises(SinkError, match=f"already holds batches of another run of fleet:alerts .*{app_id('fleet', 'alerts')}"):
        sink.batch_function(None, target)  # a fresh checkpoint: another run's batches
    sink.batch_function(None, dataclasses.replace(target, fresh_checkpoint=False))  # the same run resumed: fine
