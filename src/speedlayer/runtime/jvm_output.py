"""What Spark's JVM prints on the terminal: everything, except PySpark's own lost-connection tracebacks and chatter,
Java's start-up notice and the resolver's report of ``spark.jars.packages``.

The JVM's stderr carries Spark's resolver report for ``spark.jars.packages``, whatever a job's Python
code prints in a worker, and the tracebacks PySpark's Python workers print when the JVM drops their
connection, as it does when a stop interrupts a batch (``PySpark daemon failed to flush the output
to the worker process: ... BrokenPipeError``). Those say nothing to a user and look like a crash, so
they go to Spark's log file instead, as do the progress lines PySpark's transformWithState driver
worker prints at each query start (``Streaming TransformWithStateInPandas Python worker Starting
execution of UDF: ...``), Java's notice of the incubating vector module Spark loads (``WARNING: Using
incubator modules: jdk.incubator.vector``, at every start), and the resolver's report (about 40 lines
at every start with a package; speedlayer says in one line what it adds, and in one line what to do
when it cannot be had); every other line reaches the terminal unchanged.

>>> with jvm_stderr_filtered(Path("/tmp/spark.log")):  # doctest: +SKIP
...     spark = builder.getOrCreate()                   # the JVM starts here, its stderr piped through us
"""

from __future__ import annotations

import contextlib
import os
import re
import sysconfig
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

#: the line PySpark's daemon writes before the traceback of a worker whose connection is gone
DAEMON_FLUSH = "PySpark daemon failed to flush the output to the worker process:"
TRACEBACK = "Traceback (most recent call last):"
#: what a Python worker raises when the JVM's end of its socket is closed under it
CONNECTION_LOST = ("BrokenPipeError", "ConnectionResetError", "ConnectionAbortedError", "EOFError")
#: PySpark's error for a worker that could not connect back in time (the run restarts the query and says so)
CANNOT_CONNECT = "[CANNOT_OPEN_SOCKET]"
#: how PySpark's own debugging prints begin (each followed by a blank line, as they end in a newline)
CHATTER = ("Starting Streaming TransformWithState", "Streaming TransformWithState")
#: what Java itself prints at the start of every Spark JVM
JVM_NOTICE = "WARNING: Using incubator modules:"
#: the lines of Ivy's report as Spark's resolver prints it, and spark-submit's error when it resolves nothing;
#: the tab-indented and blank lines after them belong to them too
_IVY = re.compile(r"^(::|Ivy Default Cache set to: |The jars for the packages stored in: |downloading \S+:|"
                  r"\S+#\S+ added as a dependency$|Exception in thread \"main\" \S+: \[unresolved dependency)")
_FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)"')
_STDLIB = sysconfig.get_paths()["stdlib"]


def pysparks_lost_connection(block: list[str]) -> bool:
    """Whether a traceback ``block`` (its lines) is PySpark's own report of a connection the JVM closed, or
    of one a worker could not open in time (a busy machine: the run restarts the query and says so in a line).

    >>> pysparks_lost_connection([DAEMON_FLUSH, TRACEBACK, '  File "/v/pyspark/daemon.py", line 93, in worker',
    ...                           "BrokenPipeError: [Errno 32] Broken pipe"])
    True
    >>> pysparks_lost_connection([TRACEBACK, '  File "/job/udf.py", line 3, in f', "EOFError"])
    False
    """
    paths = [m["path"] for m in map(_FRAME.match, block) if m]
    raised = next((line for line in reversed(block) if line.strip() and not line[0].isspace()), "")
    return (bool(paths) and all("/pyspark/" in p or p.startswith(_STDLIB) or p.startswith("<frozen") for p in paths)
            and (raised.split(":", 1)[0].strip().endswith(CONNECTION_LOST) or CANNOT_CONNECT in raised))


def split_blocks(lines: Iterable[str]) -> Iterator[tuple[list[str], bool]]:
    """``lines`` grouped as they should go: (a traceback with its heading, True) or (one other line, False).

    A traceback ends at its exception line, the first unindented line after its frames.

    >>> [len(b) for b, _ in split_blocks(["a", TRACEBACK, "  File x", "KeyError: 1", "b"])]
    [1, 3, 1]
    """
    block: list[str] = []
    for line in lines:
        text = line.rstrip("\n")
        if not block:
            if text in (DAEMON_FLUSH, TRACEBACK):
                block = [line]
            else:
                yield [line], False
        elif text == TRACEBACK and block[-1].rstrip("\n") == DAEMON_FLUSH or text[:1].isspace():
            block.append(line)
        else:
            block.append(line)
            yield block, True
            block = []
    if block:
        yield block, True


def for_the_log(blocks: Iterable[tuple[list[str], bool]]) -> Iterator[tuple[list[str], bool]]:
    """Each block of ``split_blocks`` with whether it goes to the log: PySpark's lost-connection tracebacks,
    its chatter lines and the blank line after each of those, Java's start-up notice and the resolver's report.

    >>> [log for _, log in for_the_log([(["Streaming TransformWithStateInPandas Python worker ..."], False),
    ...                                  (["\\n"], False), (["\\n"], False), (["job"], False),
    ...                                  (["WARNING: Using incubator modules: jdk.incubator.vector"], False)])]
    [True, True, False, False, True]
    """
    after_aside = in_report = False
    for block, is_traceback in blocks:
        text = block[0].rstrip("\n")
        in_report = not is_traceback and (bool(_IVY.match(text)) or in_report and (text.startswith("\t") or not text))
        aside = (pysparks_lost_connection([line.rstrip("\n") for line in block]) if is_traceback
                 else in_report or text.startswith((*CHATTER, JVM_NOTICE)) or (after_aside and not text))
        yield block, aside
        after_aside = aside and bool(text)


def _pump(source: BinaryIO, terminal: BinaryIO, log_file: Path) -> None:
    lines = (raw.decode("utf-8", "replace") for raw in source)
    for block, aside in for_the_log(split_blocks(lines)):
        if aside:
            with contextlib.suppress(OSError), log_file.open("a", encoding="utf-8") as log:
                log.write("".join(block))
            continue
        with contextlib.suppress(OSError):
            terminal.write("".join(block).encode("utf-8"))
            terminal.flush()


@contextlib.contextmanager
def jvm_stderr_filtered(log_file: Path) -> Iterator[None]:
    """Give a JVM started inside the block a stderr piped through a filter to this process's stderr.

    Only the JVM (and whatever else starts inside the block) holds the pipe afterwards; the filter
    ends when it exits. Outside the block this process's own stderr is untouched.
    """
    read_end, write_end = os.pipe()
    terminal = os.fdopen(os.dup(2), "wb")
    # started first: a JVM writing more than a pipe holds (Spark's resolver report) must not wait for us
    threading.Thread(target=_pump, args=(os.fdopen(read_end, "rb"), terminal, log_file),
                     name="jvm-stderr", daemon=True).start()
    saved = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
