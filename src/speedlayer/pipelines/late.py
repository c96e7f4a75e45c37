"""The ``late`` output of any job: events behind the watermark, kept (see ``speedlayer.state.late``).

A job offers it by declaring its dedup key (``Job.dedup_key``: a field, or a tuple of fields),
listing ``LATE`` among its outputs (``speedlayer.pipelines.base``) and returning
``late_events(watermarked, JOB, params)`` from its pipeline, where ``watermarked`` is its decoded
events with the watermark set, before dedup.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from speedlayer.core.errors import ConfigError
from speedlayer.decode.observation import LATE_OBSERVATION
from speedlayer.pipelines.base import Job, Params, check_dedup_key
from speedlayer.state.late import EVENT_MS, GROUP, OFFSET, LateProcessor, input_columns, late_schema


def _input(events: DataFrame, name: str, time_field: str, params: Params) -> Column:
    """One of the processor's input columns. The offset (which of differing late copies is shown)
    only with ``--dedup exact``: every event goes to the processor, and fast mode spares the bytes."""
    if name == EVENT_MS:
        return F.unix_millis(time_field).alias(name)
    if name == OFFSET and (params.dedup != "exact" or name not in events.columns):
        return F.lit(None).cast("string").alias(name)
    return F.col(name)


def _dedup_key(job: Job) -> tuple[str, ...]:
    """The fields late copies are counted by: the job's dedup key (checked as for a job listing ``late``)."""
    if job.dedup_key is None:
        raise ConfigError(f"job {job.name!r} has no dedup_key, which its late output keys on: declare "
                          "Job(dedup_key=FIELD), the field re-sent copies of an event share (or a tuple of the "
                          "fields they share together)")
    check_dedup_key(job, late=True)
    return job.dedup_fields


def late_events(watermarked: DataFrame, job: Job, params: Params, window_ms: int | None = None,
                lateness_ms: int = 0) -> DataFrame:
    """The events ``job``'s stateful operators drop as late, from its events with the watermark set (before dedup).

    A row is the event's own fields (``job.schema``, event time as a timestamp), then the tumbling
    window of ``window_ms`` (default ``params.window_ms``) it belonged to, the watermark it missed
    and ``copies``: re-sent copies late in one batch share one row (by all fields of ``job.dedup_key``),
    the lowest offset's with ``--dedup exact``. With ``lateness_ms`` (the fleet's allowed lateness) an event is late
    only that far behind the watermark (the fleet windows correct themselves with the others).
    A static DataFrame has no watermark, so nothing in it is late.

    >>> late = late_events(with_watermark(events, params, APP_ACTION.time_field), APP_ACTIONS_JOB, params)  # doctest: +SKIP
    >>> late.columns                                                                               # doctest: +SKIP
    ['id', 'time', 'action', 'window_start', 'window_end', 'missed_watermark', 'copies']
    """
    key, schema = _dedup_key(job), late_schema(job.schema)
    if not watermarked.isStreaming:
        return watermarked.sparkSession.createDataFrame([], schema)
    time_field = job.schema.time_field
    # One key for every event, and no watermark column in the input: the processor must see late rows.
    rows = watermarked.select(F.lit(0).alias(GROUP), *(_input(watermarked, c, time_field, params)
                                                       for c in input_columns(job.schema)))
    processor = LateProcessor(job.schema, key, window_ms or params.window_ms, lateness_ms)
    late = rows.groupBy(GROUP).transformWithStateInPandas(
        statefulProcessor=processor, outputStructType=schema, outputMode="Append", timeMode="EventTime",
    )
    # rows written per batch, for the "late events kept" metric (the way decode observes dead letters)
    return late.observe(LATE_OBSERVATION, F.count(F.lit(1)).alias("rows"))
