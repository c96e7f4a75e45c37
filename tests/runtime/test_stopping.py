"""What a failed query's one line says: a Python worker's error ends with the worker's own exception."""

from speedlayer.runtime.stopping import first_line

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
