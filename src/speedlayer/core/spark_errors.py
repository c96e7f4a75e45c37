"""Spark's analysis errors as one line, with PySpark's own report of them silenced while we word ours.

PySpark 4 logs every analysis error that has a query context (an unknown column, an unknown
function) as a JSON record on stderr when it raises it; where speedlayer turns the error into
one line of its own, that record is noise before it.

>>> with quiet_analysis_errors():                       # doctest: +SKIP
...     try:
...         spark.sql("SELECT nope FROM events")
...     except AnalysisException as exc:
...         print(spark_reason(exc))
[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter with name `nope` cannot be ...
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

#: the loggers PySpark reports analysis errors on (``pyspark.errors.exceptions.base``)
_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
#: longest reason kept from Spark's message
MAX_REASON = 400


@contextmanager
def quiet_analysis_errors() -> Iterator[None]:
    """Silence PySpark's JSON record of analysis errors raised inside the block."""
    from pyspark.logger import PySparkLogger

    # PySparkLogger.getLogger, not logging.getLogger: a plain logger made first under these names
    # would be handed to PySpark, whose calls pass keywords a plain logger refuses.
    loggers = [PySparkLogger.getLogger(name) for name in _LOGGERS]
    before = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, disabled in zip(loggers, before):
            logger.disabled = disabled


def spark_reason(error: BaseException) -> str:
    """The first non-blank line of a Spark error, without the trailing ``;``.

    >>> spark_reason(ValueError("\\n[PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'.\\n== SQL ==\\nSELEC"))
    "[PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'."
    """
    for line in str(error).splitlines():
        if line.strip():
            return line.strip().rstrip(";").strip()[:MAX_REASON]
    return type(error).__name__


#: How Spark recognises a foreachBatch function interrupted by ``query.stop()`` (its regex
#: ``PROXY_ERROR`` in StreamExecution). Re-raised short on purpose: matched against Spark's full
#: error text, several kB long, that regex overflows the JVM stack and kills the query thread.
INTERRUPTED = "py4j.protocol.Py4JJavaError: An error occurred while calling collectToPython.\n: java.lang.InterruptedException"
_INTERRUPTIONS = ("java.lang.InterruptedException", "java.io.InterruptedIOException",
                  "java.nio.channels.ClosedByInterruptException")


def interrupted(error: BaseException) -> bool:
    """Whether a Spark job failed because its query is being stopped."""
    from py4j.protocol import Py4JJavaError

    text = str(error) if isinstance(error, Py4JJavaError) else ""
    return any(f": {name}" in text for name in _INTERRUPTIONS)


def raise_if_interrupted(error: BaseException) -> None:
    """Inside a ``foreachBatch`` function: a Spark job cut by its query's stop re-raised in the words Spark
    takes for a stop (``INTERRUPTED``), also when the job's error wraps the interruption (as a broadcast's
    wait does); any other error is left to the caller.

    >>> raise_if_interrupted(ValueError("the model did not converge"))
    """
    if interrupted(error):
        raise RuntimeError(INTERRUPTED) from None
