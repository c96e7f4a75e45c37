"""The fleet job's ``late`` output: events behind the watermark, kept (see ``speedlayer.state.late``)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from speedlayer.decode.observation import LATE_OBSERVATION
from speedlayer.pipelines.base import Params
from speedlayer.state.late import INPUT_COLUMNS, LATE_SCHEMA, LateProcessor


def _input(events: DataFrame, name: str, params: Params) -> Column:
    """One of the processor's input columns. The offset (which of differing late copies is shown)
    only with ``--dedup exact``: every event goes to the processor, and fast mode spares the bytes."""
    if name == "event_ms":
        return F.unix_millis("event_time").alias(name)
    if name == "offset" and (params.dedup != "exact" or name not in events.columns):
        return F.lit(None).cast("string").alias(name)
    return F.col(name)


def late_events(watermarked: DataFrame, params: Params) -> DataFrame:
    """Events that the fleet windows drop as late, from events with the watermark set (before dedup).

    Each comes with the tumbling window (``params.window_ms``) it belonged to and the watermark it
    missed. With ``params.allowed_lateness_ms`` an event is late only that far behind the watermark
    (the windows correct themselves with the others). A static DataFrame has no watermark, so nothing in it is late.
    Of differing copies late in one batch, the lowest offset's row is shown with ``--dedup exact``.

    >>> late_events(with_watermark(events, Params()), Params()).columns[-3:]  # doctest: +SKIP
    ['window_end', 'missed_watermark', 'copies']
    """
    if not watermarked.isStreaming:
        return watermarked.sparkSession.createDataFrame([], LATE_SCHEMA)
    # One key for every event, and no watermark column in the input: the processor must see late rows.
    rows = watermarked.select(F.lit(0).alias("_all"), *(_input(watermarked, c, params) for c in INPUT_COLUMNS))
    late = rows.groupBy("_all").transformWithStateInPandas(
        statefulProcessor=LateProcessor(params.window_ms, params.allowed_lateness_ms), outputStructType=LATE_SCHEMA,
        outputMode="Append", timeMode="EventTime",
    )
    # rows written per batch, for the "late events kept" metric (the way decode observes dead letters)
    return late.observe(LATE_OBSERVATION, F.count(F.lit(1)).alias("rows"))
