"""The fleet job as a stream: equal to the batch function on the same events; restart exactly once."""

import json

from pyspark.testing import assertDataFrameEqual

from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from tests.helpers import batch_output, closed_windows

START = "2026-11-22T10:00:00Z"
SOURCE = f"generator://?seed=11&start={START}&rate=200&vehicles=50&late=0&rows_per_batch=3000"


def settings(tmp_path, **kwargs):
    base = dict(job="fleet", source=SOURCE, max_events=9000, state_dir=str(tmp_path / "state"),
                sinks={"windows": "memory:eq_windows", "alerts": "memory:eq_alerts", "dead-letters": "memory:eq_dead"})
    return RunSettings(**{**base, **kwargs})


def test_stream_equals_batch_on_late_free_data(spark, tmp_path):
    # two batches of events, 22.5 s each: windows span the batch boundary
    s = settings(tmp_path, source=SOURCE.replace("rows_per_batch=3000", "rows_per_batch=4500"))
    summary = Run(spark, plan_run(s)).start_and_wait()
    assert summary.stopped_by == "--max-events 9000"
    watermark = next(q.watermark for q in summary.queries if q.output == "windows")
    expected_windows = closed_windows(batch_output(spark, s, "windows"), watermark)
    assert expected_windows.count() > 100
    assertDataFrameEqual(spark.table("eq_windows"), expected_windows, rtol=1e-9)
    assertDataFrameEqual(spark.table("eq_alerts"), batch_output(spark, s, "alerts"))
    assertDataFrameEqual(spark.table("eq_dead"), batch_output(spark, s, "dead-letters"))
    assert spark.table("eq_dead").count() > 0


def test_restart_resumes_from_the_checkpoint_and_writes_each_window_once(spark, tmp_path):
    out = tmp_path / "windows"
    # batches 0 and 1 before the stop, batch 2 (the last events) and the flush after it
    s = settings(tmp_path, sinks={"windows": f"parquet://{out}"}, max_events=9000)
    first = Run(spark, plan_run(s))
    first.start()
    from tests.helpers import wait_for_batch

    wait_for_batch(first.queries[0], 1)
    first.stop_requested.set()
    stopped = first.wait()
    assert stopped.stopped_by == "stop requested"
    written_before = spark.read.parquet(str(out)).count()

    summary = Run(spark, plan_run(s)).start_and_wait()
    assert summary.stopped_by == "--max-events 9000"
    manifest = json.loads((tmp_path / "state" / "speedlayer-run.json").read_text())
    assert manifest["run_state"]["generator_start_ms"] == 1795341600000
    result = spark.read.parquet(str(out))
    expected = closed_windows(batch_output(spark, s, "windows"), summary.queries[0].watermark)
    assert result.count() > written_before
    assert result.groupBy("window_start", "vehicle_id").count().where("count > 1").count() == 0
    assertDataFrameEqual(result, expected, rtol=1e-9)
