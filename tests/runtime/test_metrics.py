"""The listener -> metrics path on recorded progress reports: derived figures, totals, Prometheus text."""

import json
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from speedlayer.monitor.prometheus import metrics_registry
from speedlayer.runtime.metrics import batch_metrics, epoch_ms
from speedlayer.runtime.progress import ProgressTracker
from speedlayer.sources.base import offsets_behind

RECORDED = json.loads((Path(__file__).parent / "data" / "fleet_windows_progress.json").read_text())


def test_one_batch_gives_latency_phases_state_and_drops():
    m = batch_metrics(RECORDED[0])
    end = epoch_ms("2026-11-22T13:33:40.000Z") + 1600
    assert (m.batch_id, m.batch_ms, m.ended_ms, m.input_rows, m.events) == (4, 1600, end, 10000, 9980)
    assert m.latency_ms["event"] == {"p50": 2600, "p95": 5600, "p99": 6400}
    assert m.latency_ms["ingest"] == {"p50": 1800, "p95": 4700, "p99": 5500}
    assert m.phases_ms["addBatch"] == 1200 and "triggerExecution" not in m.phases_ms
    assert m.dead_letters == 20
    assert (m.dropped_by_watermark, m.duplicates_removed, m.output_rows) == (10, 95, 250)
    assert [(op.name, op.rows, op.memory_bytes) for op in m.state] == [
        ("stateStoreSave", 1500, 524288), ("dedupeWithinWatermark", 20000, 2097152)]
    assert m.watermark_lag_ms == 1795354420900 - epoch_ms("2026-11-22T13:33:30.500Z")
    assert m.scheduling_delay_ms is None  # no batch before it


def test_tracker_derives_delay_lag_and_totals_across_batches():
    tracker = ProgressTracker(interval_ms=0, source_lag=offsets_behind)
    first, second = (tracker.record(p) for p in RECORDED)
    # processing:0s: the next batch is due when the previous one ended (13:33:41.600); it started 13:33:42.300
    assert second.scheduling_delay_ms == 700
    assert second.latency_ms == {} and second.dead_letters == 0
    # the newest event time carries over an empty batch, so the watermark lag is still known
    assert second.watermark_lag_ms == 1795354420900 - epoch_ms("2026-11-22T13:33:35.900Z")
    assert first.source_lag is None and second.source_lag == 35  # no lag reported, then Kafka's: 30 + 5
    q = tracker.get("fleet_windows")
    assert q.totals == {"output_rows": 250, "dropped_by_watermark": 10, "duplicates_removed": 95, "dead_letters": 20,
                        "late_events_kept": 0}
    assert sum(q.duration_counts) == 2 and abs(q.duration_sum_s - 2.1) < 1e-9


def test_interval_triggers_are_due_on_the_interval_grid():
    tracker = ProgressTracker(interval_ms=5000)
    tracker.record({**RECORDED[0], "timestamp": "2026-11-22T13:33:40.000Z"})
    late = tracker.record({**RECORDED[1], "timestamp": "2026-11-22T13:33:46.250Z"})
    assert late.scheduling_delay_ms == 1250  # due at 13:33:45.000


def test_subscribers_see_every_batch_and_a_failing_one_is_contained():
    tracker = ProgressTracker()
    seen = []
    tracker.subscribe(lambda m: 1 / 0)
    tracker.subscribe(lambda m: seen.append(m.batch_id))
    for p in RECORDED:
        tracker.record(p)
    assert seen == [4, 5]


def test_prometheus_text_parses_with_labels_by_speedlayer_job_and_query():
    tracker = ProgressTracker(source_lag=offsets_behind)
    tracker.record(RECORDED[0])
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(metrics_registry("fleet", tracker)).decode())}
    assert set(families) >= {"speedlayer_batches", "speedlayer_input_rows", "speedlayer_latency_seconds",
                             "speedlayer_batch_duration_seconds", "speedlayer_state_rows", "speedlayer_duplicates_removed"}

    def value(family, **labels):
        return next(s.value for s in families[family].samples if labels.items() <= s.labels.items())

    assert value("speedlayer_input_rows", speedlayer_job="fleet", query="fleet_windows") == 10000
    assert value("speedlayer_latency_seconds", since="event", percentile="p99") == 6.4
    assert value("speedlayer_batch_phase_seconds", phase="addBatch") == 1.2
    assert value("speedlayer_state_rows", operator="1:dedupeWithinWatermark") == 20000
    assert value("speedlayer_duplicates_removed", query="fleet_windows") == 95
    assert value("speedlayer_batch_duration_seconds", le="2.5") == 1  # 1.6 s falls in the 2.5 s bucket


def test_prometheus_counts_executors_their_cores_and_the_lost_ones():
    from speedlayer.runtime.executors import ExecutorRecord, ExecutorWatch

    lists = iter([[ExecutorRecord("driver"), ExecutorRecord("0", cores=2), ExecutorRecord("1", cores=2)],
                  [ExecutorRecord("driver"), ExecutorRecord("0", cores=2)]])
    watch = ExecutorWatch(lambda: next(lists), local=False)
    watch.poll()
    watch.poll(force=True)
    text = generate_latest(metrics_registry("fleet", ProgressTracker(), watch)).decode()
    samples = {s.name: (s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples["speedlayer_executors"] == ({"speedlayer_job": "fleet"}, 1)
    assert samples["speedlayer_executor_cores"] == ({"speedlayer_job": "fleet"}, 2)
    assert samples["speedlayer_executors_lost_total"] == ({"speedlayer_job": "fleet"}, 1)
    # not known yet (no Spark read so far): no executor figures rather than made-up ones
    quiet = generate_latest(metrics_registry("fleet", ProgressTracker(), ExecutorWatch(None, local=False))).decode()
    assert "speedlayer_executors" not in quiet


def test_latency_stays_that_of_the_newest_batch_with_events():
    tracker = ProgressTracker()
    for p in RECORDED:  # the second batch read nothing
        tracker.record(p)
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(metrics_registry("fleet", tracker)).decode())}
    p99 = [s.value for s in families["speedlayer_latency_seconds"].samples if s.labels["percentile"] == "p99"
           and s.labels["since"] == "event"]
    assert p99 == [6.4]


def test_terminal_view_shows_rates_and_latency(tmp_path):
    from rich.console import Console

    from speedlayer.monitor.view import rates_table
    from speedlayer.runtime.plan import plan_run
    from speedlayer.runtime.run import Run
    from speedlayer.runtime.settings import RunSettings

    def shown(progress) -> str:
        run = Run(None, plan_run(RunSettings(job="fleet", sinks={"windows": "memory:"}, state_dir=str(tmp_path))))
        run.tracker.record(progress)
        console = Console(record=True, width=220)
        console.print(rates_table(run))
        return console.export_text()

    text = shown(RECORDED[0])  # since ingest leads: 1.8 s at p50 where the events are 2.6 s old
    assert "2,000" in text and "6,250" in text and "latency since ingest" in text
    assert "1,800ms / 4,700ms / 5,500ms" in text and "6,400ms" not in text
    no_ingest = json.loads(json.dumps(RECORDED[0]))  # a source that stamps no ingest time: since the event, marked
    del no_ingest["observedMetrics"]["speedlayer_latency"]["ingest_ms"]
    assert "2,600ms / 5,600ms / 6,400ms (event)" in shown(no_ingest)


def test_a_run_without_a_live_view_logs_each_querys_progress(tmp_path):
    import io
    import time

    from rich.console import Console

    from speedlayer.monitor.view import ProgressLog
    from speedlayer.runtime.plan import plan_run
    from speedlayer.runtime.run import Run
    from speedlayer.runtime.settings import RunSettings

    run = Run(None, plan_run(RunSettings(job="fleet", sinks={"windows": "memory:", "alerts": "memory:"},
                                         state_dir=str(tmp_path))))
    run.tracker.record(RECORDED[0])
    log = ProgressLog(Console(file=io.StringIO(), record=True, width=80), every_s=0.05)
    log.attach(run)
    deadline = time.monotonic() + 10
    while "alerts" not in log.console.export_text(clear=False) and time.monotonic() < deadline:
        time.sleep(0.02)
    log.close()
    lines = log.console.export_text().splitlines()
    time.sleep(0.3)
    assert log.console.export_text() == ""  # closed: nothing more is printed
    windows = next(line for line in lines if " windows: " in line)  # one line each, however narrow the console
    assert "batches, input 2,000 rows/s" in windows and "latency since ingest p50/p95/p99 1,800ms / 4,700ms / 5,500ms" in windows
    assert any(line.endswith(" alerts: no batch yet") for line in lines)


def test_terminal_view_shows_the_executors_and_the_last_lost_one(tmp_path):
    from rich.console import Console

    from speedlayer.monitor.view import LiveView
    from speedlayer.runtime.executors import ExecutorRecord, ExecutorWatch
    from speedlayer.runtime.plan import plan_run
    from speedlayer.runtime.run import Run
    from speedlayer.runtime.settings import RunSettings

    run = Run(None, plan_run(RunSettings(job="fleet", sinks={"windows": "memory:"}, state_dir=str(tmp_path))))
    view = LiveView(Console(record=True, width=200))
    view._run = run
    view.console.print(view)
    assert "executors" not in view.console.export_text()  # nothing known: no line
    lists = iter([[ExecutorRecord("driver"), ExecutorRecord("0", cores=2), ExecutorRecord("1", cores=2)],
                  [ExecutorRecord("driver"), ExecutorRecord("0", cores=2),
                   ExecutorRecord("1", active=False, cores=2, removed_ms=1795354442114, reason="Worker lost")]])
    run.executors = ExecutorWatch(lambda: next(lists), local=False, since_ms=0)
    run.executors.poll()
    run.executors.poll(force=True)
    view.console.print(view)
    assert "executors 1 (1 lost), 2 cores · last lost: 1 at 13:34:02Z (Worker lost)" in view.console.export_text()


# --- late events kept ---
LATE_RECORDED = json.loads((Path(__file__).parent / "data" / "fleet_late_progress.json").read_text())


def test_late_events_kept_come_from_the_late_querys_observation():
    """Recorded from a fleet run with --allowed-lateness 20s: batches 4 and 5 each kept one late event."""
    tracker = ProgressTracker()
    kept = [tracker.record(p).late_events_kept for p in LATE_RECORDED]
    assert kept == [0, 1, 1]
    assert tracker.get("fleet_late").totals["late_events_kept"] == 2
    tracker.record(RECORDED[0])  # a query without the observation keeps none
    assert batch_metrics(RECORDED[0]).late_events_kept is None
    text = generate_latest(metrics_registry("fleet", tracker)).decode()
    samples = {(s.name, s.labels["query"]): s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "speedlayer_late_events_kept_total"}
    assert samples == {("speedlayer_late_events_kept_total", "fleet_late"): 2.0,
                       ("speedlayer_late_events_kept_total", "fleet_windows"): 0.0}
    # rows written: counted by Spark's memory sink; a foreachBatch sink's are not known, so not shown as 0
    written = {s.labels["query"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "speedlayer_output_rows_total"}
    assert written == {"fleet_windows": 250.0}
