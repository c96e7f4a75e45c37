"""What a failed query's one line says: a Python worker's error ends with the worker's own exception."""

import threading
import time

from speedlayer.runtime.stopping import RUNNING_BATCH, first_line, stop_after_batch

WORKER = """[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent call last):
  File "/jobs/refunds.py", line 9, in checked
    raise ValueError(f"refund of {amount} needs a manager")
ValueError: refund of 500.0 needs a manager
 SQLSTATE: 38000
=== Streaming Query ===
Identifier: refunds [id = 7, runId = 8]
"""

CHAINED = """An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):
  File "/jobs/x.py", line 3, in write
    rows[key]
KeyError: 'vehicle'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/jobs/x.py", line 5, in write
    raise RuntimeError("no such vehicle:\\n V9")
RuntimeError: no such vehicle:
 V9
"""


def test_a_python_workers_error_ends_with_its_exception_not_the_traceback_header():
    assert first_line(RuntimeError(WORKER)) == ("[PYTHON_EXCEPTION] An exception was thrown from the Python worker: "
                                                "ValueError: refund of 500.0 needs a manager")


def test_of_chained_exceptions_the_last_one_is_told():
    assert first_line(RuntimeError(CHAINED)) == ("An exception was raised by the Python Proxy. Return Message: "
                                                 "RuntimeError: no such vehicle:")


def test_other_errors_keep_their_first_line():
    assert first_line(RuntimeError("\n[STREAM_FAILED] boom\n  at Spark")) == "[STREAM_FAILED] boom"
    assert first_line(RuntimeError("ends with Traceback (most recent call last):")) == \
        "ends with Traceback (most recent call last):"


class FakeQuery:
    """A streaming query as stop_after_batch sees it: its status, its last progress, stop()."""

    def __init__(self, name: str, message: str, batch_polls: int = 0, fails: bool = False,
                 back_to_back: bool = False, interrupt_error: Exception | None = None):
        self.name, self.message, self.isActive, self.batch_id = name, message, True, 4
        self.polls_left, self.stopped_at_batch, self.fails, self.error = batch_polls, None, fails, None
        self.back_to_back, self.interrupt_error = back_to_back, interrupt_error

    @property
    def status(self) -> dict:
        if self.message in RUNNING_BATCH and self.polls_left == 0:
            if self.fails:  # the batch fails; Spark's thread has not yet marked the query inactive
                self.error, self.message = RuntimeError("refused batch 4"), "Waiting for next trigger"
            else:  # the batch commits, and under back-to-back batches the next one begins
                self.batch_id += 1
                self.message = "Processing new data" if self.back_to_back else "Waiting for next trigger"
        self.polls_left -= 1
        return {"message": self.message, "isTriggerActive": self.message != "Waiting for next trigger",
                "isDataAvailable": True}

    @property
    def lastProgress(self) -> dict:
        return {"batchId": self.batch_id}

    def exception(self) -> Exception | None:
        return self.error

    def stop(self) -> None:
        if self.message in RUNNING_BATCH:  # stop() interrupts the batch: Spark mostly records no error
            self.message, self.error = "Stopped", self.interrupt_error
        self.stopped_at_batch, self.isActive = self.batch_id, False


def test_a_query_asking_its_source_for_data_stops_at_once_and_one_running_a_batch_after_it():
    idle = FakeQuery("idle", "Getting offsets from FileStreamSource[file:/landing]")
    busy = FakeQuery("busy", "No new data but cleaning up state", batch_polls=5)
    started = time.monotonic()
    assert stop_after_batch([idle, busy], immediate=False, force=threading.Event()) == {}
    assert time.monotonic() - started < 5  # not STOP_TIMEOUT_S: an idle trigger is no batch to wait for
    assert idle.stopped_at_batch == 4 and busy.stopped_at_batch == 5


def test_a_batch_failing_as_the_stop_begins_is_reported_and_one_cut_short_by_force_is_not():
    failing = FakeQuery("failing", "Processing new data", batch_polls=0, fails=True)
    errors = stop_after_batch([failing], immediate=False, force=threading.Event())
    assert str(errors["failing"]) == "refused batch 4" and not failing.isActive

    forced, force = FakeQuery("forced", "Processing new data", batch_polls=10**6), threading.Event()
    force.set()
    assert stop_after_batch([forced], immediate=False, force=force) == {}
    assert forced.stopped_at_batch == 4


def test_a_stop_that_interrupts_the_next_back_to_back_batch_is_no_failure():
    """Spark reports some interruptions inside its state stores as the query's exception (STREAM_FAILED
    with no message); a batch begun after the one waited for is cut short by the stop, not failed."""
    query = FakeQuery("joins", "Processing new data", batch_polls=2, back_to_back=True,
                      interrupt_error=RuntimeError("[STREAM_FAILED] terminated with exception:"))
    assert stop_after_batch([query], immediate=False, force=threading.Event()) == {}
    assert query.stopped_at_batch == 5 and query.error is not None  # the stop did interrupt batch 6
