"""A graceful stop (Ctrl-C, --duration) whose last batch fails is a failure, not a normal summary."""

import threading
import time

import pytest

from speedlayer.core.errors import QueryFailedError, SinkError
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from speedlayer.sinks.base import AT_LEAST_ONCE, Sink

SOURCE = "generator://?seed=3&start=2026-11-22T10:00:00Z&rate=200&vehicles=20&late=0&rows_per_batch=200"


class FailsOnceStopping(Sink):
    """A foreachBatch sink whose batch waits for ``marker``, then fails: the batch in flight at the stop."""

    scheme, guarantee, modes, writes_batches = "test", AT_LEAST_ONCE, ("append", "update"), True

    def __init__(self, entered, marker):
        self.entered, self.marker = entered, marker

    def describe(self) -> str:
        return "test:fails-once-stopping"

    def start(self, writer, df, target):
        entered, marker = self.entered, self.marker

        def write(batch, batch_id):
            entered.touch()
            deadline = time.monotonic() + 60
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            raise SinkError(f"refused batch {batch_id}: the stop marker exists")

        return writer.foreachBatch(write).start()


def test_a_batch_failing_during_the_graceful_stop_fails_the_run(spark, tmp_path, monkeypatch):
    settings = RunSettings(job="fleet", source=SOURCE, state_dir=str(tmp_path / "state"), sinks={"alerts": "memory:gs"})
    entered, marker = tmp_path / "entered", tmp_path / "stop-marker"
    plan = plan_run(settings, sinks={"alerts": FailsOnceStopping(entered, marker)})
    run = Run(spark, plan)
    stop_all = Run._stop_all

    def stop_all_marking(self):  # the marker appears the moment the graceful stop begins
        marker.touch()
        return stop_all(self)

    monkeypatch.setattr(Run, "_stop_all", stop_all_marking)
    run.start()

    def request_stop():
        while not entered.exists():
            time.sleep(0.05)
        run.stop_requested.set()  # what Ctrl-C does

    threading.Thread(target=request_stop, daemon=True).start()
    with pytest.raises(QueryFailedError) as failed:
        run.wait()
    message = str(failed.value)
    assert "\n" not in message
    assert message.startswith("query fleet_alerts failed")
    assert "refused batch" in message
