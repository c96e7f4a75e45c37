"""The stateless alerts query in Spark's continuous mode, on the generator."""

import time

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from speedlayer.core.errors import ConfigError
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from tests.helpers import batch_output

START = "2026-11-22T10:00:00Z"
# One partition: the continuous task holds one of the session's two cores for good, and reading
# the memory table needs the other.
SOURCE = f"generator://?seed=5&start={START}&rate=400&vehicles=40&late=0&duplicates=0&malformed=0.01&partitions=1"


def test_continuous_alerts_equal_the_batch_alerts_of_the_same_events(spark, tmp_path):
    s = RunSettings(job="fleet", source=SOURCE, trigger="continuous:1s", state_dir=str(tmp_path / "state"),
                    sinks={"alerts": "memory:cont_alerts"})
    run = Run(spark, plan_run(s))
    run.start()
    try:
        deadline = time.monotonic() + 120
        # Continuous queries have no batches to wait for: poll the sink until alerts arrive.
        while spark.table("cont_alerts").count() < 20:
            assert run.queries[0].exception() is None
            assert time.monotonic() < deadline, "no continuous alerts within 120 s"
            run.queries[0].awaitTermination(0.5)
    finally:
        run.stop_requested.set()
        summary = run.wait()
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
