"""The generator paced to the millisecond: rows read once due and never before, batches bounded by
``max_per_batch`` (admission control), and the lag that a machine too slow for the rate shows."""

import math
import time

import pytest
from pyspark.sql import functions as F
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.testing import assertDataFrameEqual

from speedlayer.core.errors import ConfigError
from speedlayer.sources import generator_pacing, open_source
from speedlayer.sources.generator_pacing import _PacedReader, due

START_MS = 1_790_000_000_000


def ingest_ms(n: int, rate: int) -> int:
    """Row n's ingest time after the start, as the generator documents it: n / rate seconds, in whole ms."""
    return n * 1000 // rate


@pytest.mark.parametrize("rate", [1, 3, 7, 1000, 5000])
def test_a_row_is_due_from_the_millisecond_of_its_ingest_time(rate):
    rows = 3 * rate + 5
    for after_ms in [0, 1, 332, 333, 334, 999, 1000, 1001, 2500]:
        expected = sum(1 for n in range(rows) if ingest_ms(n, rate) <= after_ms)
        assert due(START_MS + after_ms, START_MS, rate) == expected, after_ms
    assert due(START_MS - 1, START_MS, rate) == 0


def reader(monkeypatch, now_ms: int, **spec) -> _PacedReader:
    monkeypatch.setattr(generator_pacing.time, "time", lambda: now_ms / 1000)
    return _PacedReader({"start_ms": START_MS, "rate": 1000, "partitions": 2, **spec})


def test_a_batch_reads_what_is_due_but_no_more_than_max_per_batch(monkeypatch):
    paced = reader(monkeypatch, START_MS + 10_000, max_per_batch=4000)  # 10,001 rows due
    assert paced.getDefaultReadLimit() == ReadMaxRows(4000)
    assert paced.latestOffset({"n": 0}, ReadMaxRows(4000)) == {"n": 4000}
    assert paced.latestOffset({"n": 8000}, ReadMaxRows(4000)) == {"n": 10_001}
    assert paced.latestOffset({"n": 0}, ReadAllAvailable()) == {"n": 10_001}  # the engine asked for all: all
    assert paced.reportLatestOffset() == {"n": 10_001}
    assert reader(monkeypatch, START_MS, max_per_batch=None).getDefaultReadLimit() == ReadAllAvailable()
    parts = paced.partitions({"n": 8000}, {"n": 10_001})
    assert [(p.first, p.end) for p in parts] == [(8000, 9000), (9000, 10_001)]


def test_available_now_reads_what_was_due_when_it_began(monkeypatch):
    paced = reader(monkeypatch, START_MS + 999, max_per_batch=300)
    paced.prepareForTriggerAvailableNow()
    monkeypatch.setattr(generator_pacing.time, "time", lambda: (START_MS + 60_000) / 1000)
    assert paced.latestOffset({"n": 900}, ReadMaxRows(300)) == {"n": 1000}
    assert paced.latestOffset({"n": 1000}, ReadMaxRows(300)) == {"n": 1000}


def test_a_backlog_is_read_in_bounded_batches_each_row_once(spark, tmp_path):
    """Started 20 s in the past at 1,000/s: some 20,000 rows are due at once; batches of at most 3,000
    read them, each row once, and the rows are those of a batch read."""
    start_ms = int(time.time() * 1000) - 20_000
    source = open_source(f"generator://?seed=4&start={start_ms}&rate=1000&max_per_batch=3000")
    seen: list[tuple[int, int, int, int]] = []  # batch, rows, newest ingest time, when the batch ran

    def record(batch, batch_id):
        newest, rows = batch.agg(F.max(F.col("ingest_time").cast("double")), F.count("*")).first()
        seen.append((batch_id, rows, int(newest * 1000) if newest else 0, int(time.time() * 1000)))
        batch.write.mode("append").parquet(str(tmp_path / "out"))

    query = (source.read_stream(spark).writeStream.foreachBatch(record)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination(180)
    rows = [r for _, r, _, _ in seen]
    assert len(rows) >= 7 and max(rows) <= 3000 and rows[:6] == [3000] * 6, seen
    assert all(newest <= ran for _, _, newest, ran in seen), seen
    total = sum(rows)
    assert total >= 20_000
    assertDataFrameEqual(spark.read.parquet(str(tmp_path / "out")), source.read_batch(spark, total))


def test_a_view_of_the_run_reads_as_many_of_the_runs_batches_as_it_is_told_at_once(spark, tmp_path):
    """The dashboard's tap runs a batch every few seconds: at the run's max_per_batch it would fall further
    behind at each; its view_stream reads up to ``batches`` times the cap, the same rows as the run's read."""
    start_ms = int(time.time() * 1000) - 5_000
    source = open_source(f"generator://?seed=4&start={start_ms}&rate=1000&max_per_batch=300")

    def batches(stream, name):
        sizes: list[int] = []

        def record(batch, _):
            sizes.append(batch.count())
            batch.write.mode("append").parquet(str(tmp_path / name / "out"))

        query = (stream.writeStream.foreachBatch(record)
                 .option("checkpointLocation", str(tmp_path / name / "ck")).trigger(availableNow=True).start())
        query.awaitTermination(120)
        return sizes, spark.read.parquet(str(tmp_path / name / "out"))

    (capped, run_rows), (five, view_rows) = (batches(source.read_stream(spark, 4_000), "run"),
                                             batches(source.view_stream(spark, 4_000, batches=5), "view"))
    assert capped[:3] == [300] * 3 and sum(capped) == 4_000, capped
    assert five == [1_500, 1_500, 1_000], five
    assertDataFrameEqual(view_rows, run_rows)
    assert batches(source.view_stream(spark, 4_000, batches=20), "wide")[0] == [4_000]


def test_lag_is_what_is_due_and_not_yet_read():
    source = open_source(f"generator://?start={START_MS}&rate=1000&max_per_batch=3000")
    assert source.lag({"endOffset": {"n": 6000}, "latestOffset": '{"n": 10000}'}) == 4000
    assert source.lag({"endOffset": {"n": 6000}}) is None  # Spark reported no latest offset
    assert open_source("generator://?rate=1000").lag({"endOffset": 4, "latestOffset": None}) is None  # rate: none


def test_no_offset_goes_past_the_last_event_or_before_a_rows_ingest_time(monkeypatch):
    """The generator stamps row n with start + floor(n * (1000.0 / rate)) (a double, as Spark computes it):
    every row below the offset is stamped at or before now, the row at the offset after it."""
    for rate in (3, 7, 1000, 4999):
        for after_ms in (0, 1, 333, 999, 1000, 2001):
            now = START_MS + after_ms
            end = reader(monkeypatch, now, rate=rate).latestOffset({"n": 0}, ReadAllAvailable())["n"]
            stamp = [START_MS + math.floor(n * (1000.0 / rate)) for n in range(end + 1)]
            assert all(t <= now for t in stamp[:end]) and stamp[end] > now, (rate, after_ms, end)
    capped = reader(monkeypatch, START_MS + 10_000, until=5000, max_per_batch=None)
    assert capped.latestOffset({"n": 0}, ReadAllAvailable()) == capped.reportLatestOffset() == {"n": 5000}


def offsets_written(checkpoint, *lines: str):
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "7").write_text("v1\n{}\n" + "\n".join(lines))
    return checkpoint


@pytest.mark.parametrize("uri,offset,refused", [
    ("generator://?rate=10", '{"n":500}', "written with max_per_batch"),
    ("generator://?rate=10&max_per_batch=50", "4", "written without max_per_batch"),
    ("generator://?rate=10&max_per_batch=50", '{"n":500}', None),
    ("generator://?rate=10", "4", None),
])
def test_a_checkpoint_written_with_the_other_reader_is_refused_in_one_line(tmp_path, uri, offset, refused):
    checkpoint = offsets_written(tmp_path / "ck", offset)
    if refused is None:
        open_source(uri).check_checkpoint(checkpoint)
        return
    with pytest.raises(ConfigError, match=f"{refused}: run with the option as it was, or give a new --state-dir"):
        open_source(uri).check_checkpoint(checkpoint)


def test_a_resume_that_switches_the_reader_is_refused_before_its_query_starts(spark, tmp_path):
    """Even with --allow-changed-settings, a checkpoint of the rate source is not read by the paced reader."""
    from speedlayer.runtime.plan import plan_run
    from speedlayer.runtime.run import Run
    from speedlayer.runtime.settings import RunSettings

    first = RunSettings(job="fleet", source="generator://?seed=5&rate=200&vehicles=20", max_events=400,
                        state_dir=str(tmp_path / "st"), trigger="processing:0s",
                        sinks={"alerts": "parquet:" + str(tmp_path / "a")})
    Run(spark, plan_run(first)).start_and_wait()
    again = first.model_copy(update={"source": first.source + "&max_per_batch=100", "allow_changed_settings": True})
    with pytest.raises(ConfigError, match="written without max_per_batch: run with the option as it was"):
        Run(spark, plan_run(again)).start_and_wait()


def test_max_per_batch_is_refused_under_triggers_it_cannot_bound(tmp_path):
    from speedlayer.runtime.plan import plan_run
    from speedlayer.runtime.settings import RunSettings

    with pytest.raises(ConfigError, match="exclude each other"):
        open_source("generator://?rows_per_batch=10&max_per_batch=10")
    for trigger, match in (("continuous:1s", "drop it with --trigger continuous"), ("once", "use --trigger available-now")):
        settings = RunSettings(job="fleet", source="generator://?max_per_batch=10", trigger=trigger,
                               sinks={"alerts": "console:"}, state_dir=str(tmp_path / "st"))
        with pytest.raises(ConfigError, match=match):
            plan_run(settings)


def test_a_run_too_slow_for_the_rate_reads_bounded_batches_and_says_it_falls_behind(spark, tmp_path):
    """50,000 events/s due, 400 a batch: any machine is too slow. Every batch stays at 400 rows, the lag
    grows batch after batch, and the dashboard, the live view and the log say so."""
    from speedlayer.monitor.dashboard import run_state
    from speedlayer.monitor.view import progress_lines
    from speedlayer.runtime.metrics import falling_behind
    from speedlayer.runtime.plan import plan_run
    from speedlayer.runtime.run import Run
    from speedlayer.runtime.settings import RunSettings

    settings = RunSettings(job="fleet", source="generator://?seed=5&rate=50000&vehicles=50&late=0&max_per_batch=400",
                           state_dir=str(tmp_path / "st"), trigger="processing:0s", sinks={"alerts": "memory:"})
    run = Run(spark, plan_run(settings))
    name = run.plan.queries[0].name
    run.start()
    deadline = time.monotonic() + 180
    while len(run.tracker.series(name)) < 8 and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        series = run.tracker.series(name)
        read = [m.input_rows for m in series]
        lags = [m.source_lag for m in series]
        assert len(series) >= 8 and read == [400] * len(read), read
        assert all(b > a for a, b in zip(lags, lags[1:])), lags
        assert falling_behind(series) == lags[-1] > 10_000
        assert "(growing: the input is ahead of processing)" in progress_lines(run)[0]
        assert run_state(run, None)["queries"][0]["behind"] == falling_behind(run.tracker.series(name))
    finally:
        run.stop_requested.set()
        run.wait()


def test_a_batch_replayed_after_a_crash_reads_the_same_rows(spark):
    from speedlayer.testing import check_source_replay

    start_ms = int(time.time() * 1000) - 30_000
    report = check_source_replay(spark, f"generator://?seed=3&rate=1000&start={start_ms}&max_per_batch=500",
                                 max_events=3000)
    assert report.replayed_rows == 500
