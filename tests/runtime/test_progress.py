"""The progress listener: reports per query, and the end of a query as Spark announces it."""

import threading
from types import SimpleNamespace

from speedlayer.decode.observation import OBSERVATION
from speedlayer.runtime.progress import ProgressTracker

EPOCH = "1970-01-01T00:00:00.000Z"  # what Spark reports as the watermark before the first event


def report(batch_id: int, rows: int, name: str = "fleet_windows", observed: dict | None = None) -> dict:
    watermark = f"2026-11-22T10:00:0{batch_id}.000Z" if batch_id else EPOCH
    return {"name": name, "batchId": batch_id, "numInputRows": rows, "eventTime": {"watermark": watermark},
            **({"observedMetrics": {OBSERVATION: observed}} if observed else {})}


def test_reports_add_up_per_query():
    tracker = ProgressTracker()
    tracker.onQueryStarted(SimpleNamespace(id="q1", name="fleet_windows"))
    tracker.record(report(0, 100))
    assert tracker.get("fleet_windows").watermark is None  # not 1970
    for batch_id in (1, 2):
        tracker.record(report(batch_id, 100))
    q = tracker.get("fleet_windows")
    assert (q.batches, q.last_batch_id, q.input_rows, q.watermark) == (3, 2, 300, "2026-11-22T10:00:02.000Z")


def test_input_rows_count_the_records_decode_saw_not_the_rows_spark_read():
    """A files source reads whole files as rows (2 here); decode saw 40 events and 3 dead letters."""
    tracker = ProgressTracker()
    tracker.record(report(0, 2, observed={"events": 40, "dead_letters": 3}))
    tracker.record(report(1, 5))  # not observed (continuous mode): Spark's count
    assert tracker.get("fleet_windows").input_rows == 48


def test_a_restarted_query_keeps_its_batches_and_ignores_its_old_runs_late_end():
    tracker = ProgressTracker()
    tracker.onQueryStarted(SimpleNamespace(id="run1", name="fleet_windows"))
    tracker.record(report(0, 100))
    tracker.onQueryStarted(SimpleNamespace(id="run2", name="fleet_windows"))  # restarted from its checkpoint
    tracker.onQueryTerminated(SimpleNamespace(id="run1"))  # the first run's end, delivered late
    tracker.record(report(1, 100))
    q = tracker.get("fleet_windows")
    assert (q.batches, q.input_rows, q.terminated) == (2, 200, False)
    tracker.onQueryTerminated(SimpleNamespace(id="run2"))
    assert q.terminated


def test_waits_for_the_end_of_a_stopped_query_so_late_reports_count():
    tracker = ProgressTracker()
    tracker.onQueryStarted(SimpleNamespace(id="q1", name="fleet_windows"))
    assert not tracker.wait_terminated(["fleet_windows"], timeout=0.05)

    def deliver_late() -> None:  # the listener bus delivers after the query has stopped
        tracker.record(report(0, 1000))
        tracker.onQueryTerminated(SimpleNamespace(id="q1"))

    threading.Timer(0.1, deliver_late).start()
    assert tracker.wait_terminated(["fleet_windows"], timeout=5)
    assert tracker.get("fleet_windows").input_rows == 1000
