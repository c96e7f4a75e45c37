"""Stopping a run's queries gracefully, and telling what went wrong, in one line.

>>> errors = stop_after_batch(queries, immediate=False, force=threading.Event())  # doctest: +SKIP
>>> raise_if_failed_while_stopping(queries, errors, "--duration 5s")               # doctest: +SKIP
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from speedlayer.core.errors import QueryFailedError
from speedlayer.runtime.checkpoints import damaged_log, disk_full, other_state_layout
from speedlayer.sinks.batches import sink_error_message

#: longest a graceful stop waits for in-flight batches before interrupting them
STOP_TIMEOUT_S = 120
#: Spark's words for failures that are no fault of the query, and what each means: a restart from
#: the query's checkpoint replays the batch, which every sink takes (exactly-once ones by batch id)
RESTARTABLE = {
    # a Python worker it started (a Python source's planner) was too slow to connect back
    "Python worker failed to connect back": "the machine is too busy to start a Python worker in time",
    # an executor lost mid-batch held shuffle output that Spark recomputes only by rerunning the whole
    # stage, and some tasks of the batch's last stage had finished: Spark aborts the batch's job
    "A shuffle map stage with indeterminate output was failed and retried":
        "an executor was lost while its batch was being written",
}
#: how a Python traceback opens (a Python worker's error carries one in Spark's message)
TRACEBACK = "Traceback (most recent call last):"


def first_line(error: BaseException, places: Iterable[Path] = (),
               explain: Callable[[str], str | None] = lambda text: None) -> str:
    """What went wrong, in one line: a speedlayer error raised inside Spark, else the first line.

    ``places`` are the directories the failed query writes to (its checkpoint, a file sink's path):
    a full disk is told by naming the full one. ``explain`` gives the line for failures a source
    recognises (``RunPlan.explain_failure``). A first line that opens a Python traceback (a
    Python worker's error) ends with the traceback's exception instead.

    >>> first_line(RuntimeError("boom\\n  at Spark..."))
    'boom'
    >>> first_line(RuntimeError("[PYTHON_EXCEPTION] worker: Traceback (most recent call last):\\n  File x\\nKeyError: 'a'"))
    "[PYTHON_EXCEPTION] worker: KeyError: 'a'"
    """
    ours = sink_error_message(error)
    if ours:
        return ours
    text = getattr(error, "desc", None) or str(error)
    known = (damaged_log(str(text)) or disk_full(f"{text}\n{_causes(error)}", places)
             or other_state_layout(str(text), places) or explain(f"{text}\n{_causes(error)}"))
    if known:
        return known
    for line in str(text).splitlines():
        if line.strip():
            raised = _traceback_exception(str(text)) if line.rstrip().endswith(TRACEBACK) else None
            return (line.replace(TRACEBACK, raised) if raised else line).strip()[:400]
    return type(error).__name__


def restartable(error: BaseException) -> str | None:
    """Why a query's failure is no fault of its own (restarting it from its checkpoint is safe), else None.

    >>> restartable(RuntimeError("Python worker failed to connect back."))
    'the machine is too busy to start a Python worker in time'
    >>> restartable(RuntimeError("Data too long for column 'word'")) is None
    True
    """
    text = f"{getattr(error, 'desc', None) or error}\n{_causes(error)}"
    return next((why for said, why in RESTARTABLE.items() if said in text), None)


def _traceback_exception(text: str) -> str | None:
    """The exception line of the last Python traceback in ``text`` (its first unindented line), if any."""
    lines = text.splitlines()
    start = max(i for i, line in enumerate(lines) if line.rstrip().endswith(TRACEBACK))
    return next((line.strip() for line in lines[start + 1:] if line.strip() and not line[0].isspace()), None)


def _causes(error: BaseException) -> str:
    """The Java causes of a captured Spark error, as text.

    A full disk is often only the root cause (of a state store commit that failed); PySpark keeps
    the cause chain in private attributes of its captured errors (no public accessor in 4.3).
    """
    texts, cause = [], getattr(error, "_cause", None)
    for _ in range(20):  # a cycle in a cause chain must not hang the report
        if cause is None:
            break
        texts += [str(getattr(cause, "_desc", "")), str(getattr(cause, "_stackTrace", ""))]
        cause = getattr(cause, "_cause", None)
    return "\n".join(texts)


#: the status messages of a micro-batch being run, with data or without (the watermark's) (MicroBatchExecution)
RUNNING_BATCH = ("Processing new data", "No new data but cleaning up state")


def _running_batch(query: Any) -> bool:
    """Whether a query is running a micro-batch. A trigger that only asks its sources for data is
    not waited for: an idle query's trigger fires again and again (every 10 ms on Spark's default
    polling), and its batch id does not move until data comes."""
    status = query.status
    return bool(status.get("isTriggerActive")) and status.get("message") in RUNNING_BATCH


def _trigger_active(query: Any) -> bool:
    """Whether a query that has not ended is in a trigger (planning or running a batch)."""
    return bool(query.isActive and query.status.get("isTriggerActive"))


def _in_flight(query: Any, immediate: bool) -> int | None:
    """The batch a query is running (-1 before its first progress), or None to stop it now."""
    if immediate or not _running_batch(query):
        return None
    last = query.lastProgress
    return last["batchId"] if last else -1


def stop_after_batch(queries: Iterable[Any], immediate: bool, force: threading.Event) -> dict[str, BaseException]:
    """Stop every active query once the batch it is running has committed (at most ``STOP_TIMEOUT_S``).

    Waiting for an idle moment would never end under back-to-back batches, so each query is
    stopped right after its in-flight batch finishes; a batch interrupted while it is being planned
    is re-run on restart from the checkpoint. ``immediate`` (continuous and real-time epochs commit
    on their own clock) and ``force`` (a second Ctrl-C) stop at once. Returns, by query name, the
    error of each query that ended on its own (its last batch failed) or whose ``stop()`` raised;
    a batch that ``stop()`` itself interrupts is no failure.
    """
    errors: dict[str, BaseException] = {}
    pending = {}
    for query in queries:
        if query.isActive:
            pending[query] = _in_flight(query, immediate)
        else:
            _note_failure(query, errors)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while pending:
        for query, in_flight in list(pending.items()):
            last = query.lastProgress
            ended = not query.isActive
            cut_short = immediate or force.is_set() or time.monotonic() > deadline
            done = (in_flight is None or ended or (last and last["batchId"] > in_flight) or not _running_batch(query)
                    or cut_short)
            if done:
                # Under back-to-back batches the next one may have begun since the checks above.
                interrupts = cut_short or _trigger_active(query)
                try:
                    query.stop()
                except Exception as exc:  # noqa: BLE001 — reported by raise_if_failed_while_stopping
                    errors[query.name] = exc
                # A batch can fail between the checks above and stop(): the query is still active
                # then, and stop() does not raise its error. Only a stop that cut a trigger short may
                # leave an error that is no failure of the batch (Spark does not know every
                # interruption of its state stores for one).
                if (ended or not interrupts) and query.name not in errors:
                    _note_failure(query, errors)
                del pending[query]
        time.sleep(0.05)
    return errors


def _note_failure(query: Any, errors: dict[str, BaseException]) -> None:
    """Record the error a query that ended on its own ended with (a query torn down may not answer)."""
    try:
        error = query.exception()
    except Exception:  # noqa: BLE001
        return
    if error is not None:
        errors[query.name] = error


def raise_if_failed_while_stopping(queries: Iterable[Any], stop_errors: dict[str, BaseException], stopped_by: str,
                                   places: Mapping[str, list[Path]] | None = None,
                                   explain: Callable[[str], str | None] = lambda text: None) -> None:
    """A query whose last batch failed while the run was stopping fails the run, like any other failure.

    >>> raise_if_failed_while_stopping([], {}, "stop requested")
    """
    for query in queries:
        error = stop_errors.get(query.name)
        if error is not None:
            line = first_line(error, (places or {}).get(query.name, ()), explain)
            raise QueryFailedError(f"query {query.name} failed while stopping ({stopped_by}): {line}") from error
