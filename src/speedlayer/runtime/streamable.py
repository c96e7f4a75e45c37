"""Spark's own checks of a streaming query, run on every output before the first query starts.

Structured Streaming checks a query's operations against its output mode (an aggregation without
a watermark in append mode, complete mode without an aggregation, a sort, continuous mode's
limits) only in ``writeStream.start()``: with several outputs, the first ones would have started,
and written checkpoints, when a later one is refused. ``check_streamable`` runs the same checker
(``UnsupportedOperationChecker``, as Spark's ``ResolveWriteToStream`` calls it) on the analysed
plan of each query first; ``keeps_state`` tells from the same plan whether a query keeps state.

>>> check_streamable(df, output, "append", continuous=False, sink_modes=("append",))  # doctest: +SKIP
"""

from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame

from speedlayer.core.errors import ConfigError
from speedlayer.core.spark_errors import quiet_analysis_errors, spark_reason
from speedlayer.pipelines.base import Output

#: Spark's switch for the checker (on by default); when off, Spark does not check at start either
_CHECK_CONF = "spark.sql.streaming.unsupportedOperationCheck"


def _checker(df: DataFrame):
    return df.sparkSession._jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker


def refusal(df: DataFrame, mode: str, continuous: bool) -> str | None:
    """Spark's reason (one line) for refusing to start a query of ``df`` in ``mode``, or None.

    >>> refusal(events.groupBy("currency").count(), "append", continuous=False)  # doctest: +SKIP
    '[STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION] Invalid streaming output mode: append. ...'
    """
    spark = df.sparkSession
    if not df.isStreaming or spark.conf.get(_CHECK_CONF, "true").lower() != "true":
        return None
    output_mode = getattr(spark._jvm.org.apache.spark.sql.streaming.OutputMode, mode.capitalize())()
    plan = df._jdf.queryExecution().analyzed()
    check = _checker(df).checkForContinuous if continuous else _checker(df).checkForStreaming
    with quiet_analysis_errors():
        try:
            check(plan, output_mode)
        except AnalysisException as exc:
            return spark_reason(exc)
    return None


def keeps_state(df: DataFrame) -> bool:
    """Whether a query of ``df`` keeps state (an aggregation, a dedup, a stream-stream join, ...).

    >>> keeps_state(events.where("amount > 1000")), keeps_state(events.groupBy("currency").count())  # doctest: +SKIP
    (False, True)
    """
    if not df.isStreaming:
        return False
    checker = _checker(df)
    nodes = [df._jdf.queryExecution().analyzed()]
    while nodes:
        node = nodes.pop()
        if checker.isStatefulOperation(node):
            return True
        children = node.children()
        nodes.extend(children.apply(i) for i in range(children.size()))
    return False


def streaming_sources(df: DataFrame) -> list[str]:
    """The format of each streaming source a query of ``df`` reads (the streaming leaves of its plan).

    >>> streaming_sources(events.join(zones, "zone")), streaming_sources(pings.union(rides))  # doctest: +SKIP
    (['rate'], ['rate', 'kafka'])
    """
    leaves = df._jdf.queryExecution().analyzed().collectLeaves()
    streaming = [leaf for leaf in (leaves.apply(i) for i in range(leaves.size())) if leaf.isStreaming()]
    return [leaf.sourceName() if leaf.getClass().getSimpleName() == "StreamingRelationV2" else leaf.nodeName()
            for leaf in streaming]


#: stateful operations that pass each row on in the batch it came (never behind the watermark)
_PASSING_ON = ("Deduplicate", "DeduplicateWithinWatermark")


def state_fed_by_state(df: DataFrame) -> str | None:
    """The stateful operation whose rows feed another stateful operation in a query of ``df`` (its
    rows may come out behind the watermark), or None; a dedup passes rows on at once and is no such.

    >>> state_fed_by_state(windows_of(windows_of(events)))  # doctest: +SKIP
    'Aggregate'
    """
    if not df.isStreaming:
        return None
    checker = _checker(df)
    nodes = [(df._jdf.queryExecution().analyzed(), False)]
    while nodes:
        node, below_state = nodes.pop()
        stateful = bool(checker.isStatefulOperation(node))
        if stateful and below_state and node.nodeName() not in _PASSING_ON:
            return str(node.nodeName())
        children = node.children()
        nodes.extend((children.apply(i), below_state or stateful) for i in range(children.size()))
    return None


def check_streamable(df: DataFrame, output: Output, mode: str, continuous: bool, sink_modes: tuple[str, ...]) -> None:
    """Refuse, naming the output, a query Spark would refuse at start; say which other mode would do.

    ``sink_modes`` are the modes the output's sink takes (another mode is suggested only among them).
    """
    reason = refusal(df, mode, continuous)
    if reason is None:
        return
    name = output.name
    others = [m for m in output.modes if m != mode and m in sink_modes and refusal(df, m, continuous) is None]
    fixes = [f"fix the SQL in {output.defined_in}"] if output.defined_in else []
    if others:
        fixes.append(f"write it in {others[0]} mode (--output-mode {name}={others[0]})")
    if continuous:
        fixes.append("use a micro-batch trigger such as processing:1s")
    raise ConfigError(f"output {name!r} cannot run in {mode} mode: {reason}"
                      + (f": {', or '.join(fixes)}" if fixes else ""))
