"""The progress listener: reports per query, and the end of a query as Spark announces it."""

import threading
from types import SimpleNamespace

from speedlayer.monitor.progress import ProgressTracker


def report(batch_id: int, rows: int, name: str = "fleet_windows") -> dict:
    return {"name": name, "batchId": batch_id, "numInputRows": rows, "eventTime": {"watermark": f"wm{batch_id}"}}


def test_reports_add_up_per_query():
    tracker = ProgressTracker()
    tracker.onQueryStarted(SimpleNamespace(id="q1", name="fleet_windows"))
    for batch_id in range(3):
        tracker.record(report(batch_id, 100))
    q = tracker.get("fleet_windows")
    assert (q.batches, q.last_batch_id, q.input_rows, q.watermark) == (3, 2, 300, "wm2")


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
