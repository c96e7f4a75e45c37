"""The fleet ``windows`` output with allowed lateness: corrections of closed windows (see ``speedlayer.state.lateness``)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.pipelines.base import Params
from speedlayer.pipelines.fleet.options import fleet_options
from speedlayer.state.lateness import INPUT_COLUMNS, WINDOWS_SCHEMA, WindowsProcessor


def corrected_windows(limited: DataFrame, params: Params, output_mode: str = "Update") -> DataFrame:
    """Tumbling windows per vehicle with a ``revision``: 0 when closed, then one per correction.

    ``limited``: deduplicated streaming events that carry their zone's limit (``with_speed_limit``),
    with Spark's watermark delay set to watermark + ``params.allowed_lateness_ms`` (see the module
    of the processor for why).

    >>> corrected_windows(with_speed_limit(lenient, params), params).columns[-1]  # doctest: +SKIP
    'revision'
    """
    rows = limited.select(*(F.unix_millis("event_time").alias(c) if c == "event_ms" else F.col(c) for c in INPUT_COLUMNS))
    return rows.groupBy("vehicle_id").transformWithStateInPandas(
        statefulProcessor=WindowsProcessor(params.window_ms, fleet_options(params).allowed_lateness_ms),
        outputStructType=WINDOWS_SCHEMA,
        outputMode=output_mode, timeMode="EventTime",
    )
