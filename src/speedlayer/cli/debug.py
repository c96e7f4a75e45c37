"""``speedlayer --debug`` (or ``SPEEDLAYER_DEBUG=1``): after the one-line error, the whole story.

By default an error is one line that says what to do. With debug on, the line is followed by
the Python traceback with every chained cause (for a failed query: Spark's error, whose text holds
the Python worker's own traceback) and the JVM stack trace of each Spark error in the chain.
Passwords in URIs are masked as everywhere else.
"""

from __future__ import annotations

import os
import re
import traceback
from collections.abc import Iterator

ENV = "SPEEDLAYER_DEBUG"
_state = {"on": False}
#: ``scheme://user:password@``: the password part, masked in what debug prints
_URI_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s/]+@", re.IGNORECASE)


def enable(on: bool) -> None:
    """Turn debug output on or off for this process (the ``--debug`` option)."""
    _state["on"] = on


def enabled() -> bool:
    """Whether ``--debug`` was given or ``SPEEDLAYER_DEBUG`` is set to 1/true/yes/on.

    >>> enabled()  # doctest: +SKIP
    False
    """
    return _state["on"] or os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def quiet_query_context_logs() -> None:
    """Unless debug is on, silence PySpark's query-context loggers: on a Spark analysis error they print
    the whole plan and JVM stack trace, before speedlayer's one line says what to fix."""
    if enabled():
        return
    from pyspark.logger import PySparkLogger

    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def details(exc: BaseException) -> str:
    """The traceback of ``exc`` with its causes, then the JVM stack trace of each Spark error among them.

    >>> "ZeroDivisionError" in details(ZeroDivisionError("division by zero"))
    True
    """
    parts = ["".join(traceback.format_exception(exc)).rstrip()]
    for error in _chain(exc):
        stack = getattr(error, "_stackTrace", None)  # PySpark keeps a captured JVM error's trace here
        if stack:
            parts.append(f"JVM stack trace of {type(error).__name__}:\n{str(stack).rstrip()}")
    return _URI_PASSWORD.sub(r"\1***@", "\n\n".join(parts))
