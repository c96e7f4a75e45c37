"""One job file output: its Spark SQL over the view ``events``, refused in one line when Spark refuses it.

A ``window`` struct in the result is flattened to ``window_start``/``window_end``; the output's key
columns must be columns of the result.

>>> output_query(events, "big-orders", "SELECT * FROM events WHERE amount > 1000", (), "orders.yaml")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from speedlayer.core.errors import ConfigError
from speedlayer.core.spark_errors import quiet_analysis_errors, spark_reason
from speedlayer.pipelines.ops import flatten_window

#: the temporary view each output's SQL reads: the decoded events, watermarked, re-sent copies dropped
VIEW = "events"


def output_query(events: DataFrame, name: str, sql: str, key: tuple[str, ...], file: Path | str,
                 tables: Mapping[str, DataFrame] | None = None) -> DataFrame:
    """The DataFrame of output ``name``: ``sql`` over ``events`` registered as the view ``events``, and
    over ``tables``, each registered as a view of its name.

    A syntax or analysis error, a statement that is not a query, SQL that does not read the
    events, or a key column the result lacks is a ConfigError naming the output and the file.
    """
    spark = events.sparkSession
    with quiet_analysis_errors():
        try:
            _refuse_statements(spark, name, sql, file)
            for table, df in (tables or {}).items():
                df.createOrReplaceTempView(table)
            events.createOrReplaceTempView(VIEW)
            df = spark.sql(sql)
        except AnalysisException as exc:  # ParseException is one too
            raise ConfigError(f"output {name!r}: {spark_reason(exc)}: fix the SQL in {file}") from None
    if events.isStreaming and not df.isStreaming:
        raise ConfigError(f"output {name!r}: its SQL does not read the view {VIEW}: "
                          f"write it over FROM {VIEW} in {file}")
    df = _flat_window(df)
    missing = [k for k in key if k.lower() not in {c.lower() for c in df.columns}]
    if missing:
        raise ConfigError(f"output {name!r}: key column {missing[0]!r} is not a column of its SQL result "
                          f"({', '.join(df.columns)}): fix its key or its SQL in {file}")
    return df


def _refuse_statements(spark, name: str, sql: str, file: Path | str) -> None:
    """Refuse SQL that is not a query: Spark runs a command (DROP, CREATE, SET, INSERT, ...) at once."""
    jvm = spark._jvm
    plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(sql)
    command = jvm.java.lang.Class.forName("org.apache.spark.sql.catalyst.plans.logical.Command")
    kind = plan.getClass().getSimpleName()
    if command.isInstance(plan) or kind.startswith("InsertInto"):
        raise ConfigError(f"output {name!r}: its SQL is a statement ({kind}), not a query: "
                          f"write a SELECT over the view {VIEW} in {file}")


def _flat_window(df: DataFrame) -> DataFrame:
    """``df`` with a ``window`` struct (start, end) as ``window_start`` and ``window_end``."""
    window = next((f for f in df.schema.fields if f.name == "window"), None)
    if window is None or not isinstance(window.dataType, T.StructType):
        return df
    if {f.name for f in window.dataType.fields} != {"start", "end"}:
        return df
    return flatten_window(df)
