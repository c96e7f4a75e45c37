"""Operators every job may use, written once: the event-time watermark and window flattening.

>>> flatten_window(counts).columns  # doctest: +SKIP
['window_start', 'window_end', 'vehicle_id', 'events']
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.core.durations import spark_interval
from speedlayer.pipelines.base import Params


def with_watermark(events: DataFrame, params: Params, column: str = "event_time", extra_ms: int = 0) -> DataFrame:
    """Event-time watermark on ``column`` (none on a static DataFrame or in continuous and real-time mode).

    ``extra_ms`` lengthens Spark's delay beyond ``params.watermark_ms`` (windows with allowed lateness).
    """
    if not events.isStreaming or params.stateless:
        return events
    return events.withWatermark(column, spark_interval(params.watermark_ms + extra_ms))


def flatten_window(df: DataFrame) -> DataFrame:
    """``df`` with its ``window`` struct as two columns, ``window_start`` and ``window_end``, first."""
    return df.select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                     *[c for c in df.columns if c != "window"])


def ready_for_state(df: DataFrame) -> DataFrame:
    """``df``, with its session ready to run a state processor (``transformWithState``) on it when it is static.

    Spark registers the state store coordinator that such a processor calls only once the session's
    streaming query manager is first used; until then a static run fails with
    ``CANNOT_LOAD_STATE_STORE`` (cannot find endpoint ``StateStoreCoordinator``). Using it costs nothing.

    >>> incidents = ready_for_state(events).groupBy("_group").transformWithStateInPandas(...)  # doctest: +SKIP
    """
    if not df.isStreaming:
        df.sparkSession.streams  # noqa: B018 — creates the streaming query manager, which registers the coordinator
    return df
