"""The app-actions job: actions per type in 1 h windows sliding every 5 min, kept current in a table.

The lectures' example: a mobile app reports ``{id, time, action}``; count each action per window
with a watermark and upsert the counts into MySQL in update mode, so that the table always holds
the current count of every window. Re-sent events are dropped by ``id`` (``APP_ACTIONS_JOB.dedup_key``)
within the watermark (``speedlayer.pipelines.dedup``); an action outside the known list
(``APP_ACTIONS``) is a dead letter, and an action behind the watermark goes to
the ``late`` output (``speedlayer.pipelines.late``) with the ``--slide`` step it fell in.

    speedlayer run app-actions --sink counts='mysql://root@localhost:3306/app' --state-dir state/app
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.core.durations import spark_interval
from speedlayer.core.modes import APPEND, COMPLETE, UPDATE
from speedlayer.core.schemas import EventSchema, Field
from speedlayer.pipelines.base import DEAD_LETTERS, LATE, Job, LazyOutputs, Output, Params
from speedlayer.pipelines.dedup import drop_duplicates
from speedlayer.pipelines.late import late_events
from speedlayer.pipelines.ops import flatten_window, with_watermark

#: what a mobile app reports; any other action is refused to dead letters
APP_ACTIONS = ("open", "view", "click", "search", "add_to_cart", "purchase", "share", "close")

APP_ACTION = EventSchema(
    name="app action",
    fields=(
        Field("id", "string"),
        Field("time", "timestamp"),
        Field("action", "string", choices=APP_ACTIONS),
    ),
    time_field="time",
)


def action_counts(events: DataFrame, params: Params) -> DataFrame:
    """Actions per type per sliding window (``--sliding-window`` 1h every ``--slide`` 5min).

    >>> action_counts(events_df, Params(sliding_window_ms=3_600_000, slide_ms=300_000)).columns  # doctest: +SKIP
    ['window_start', 'window_end', 'action', 'actions']
    """
    events = drop_duplicates(with_watermark(events, params, APP_ACTION.time_field), params, APP_ACTIONS_JOB.dedup_key)
    window = F.window("time", spark_interval(params.sliding_window_ms), spark_interval(params.slide_ms))
    return flatten_window(events.groupBy(window, "action").agg(F.count(F.lit(1)).alias("actions")))


def app_actions_pipeline(events: DataFrame, params: Params) -> Mapping[str, DataFrame]:
    """``counts``, and ``late``: actions behind the watermark, each with the ``--slide`` step it fell in.

    A sliding window holds every step it covers, so each count covering a late action's step misses it.

    >>> sorted(app_actions_pipeline(decoded.events, Params()))  # doctest: +SKIP
    ['counts', 'late']
    """
    return LazyOutputs({
        "counts": lambda: action_counts(events, params),
        "late": lambda: late_events(with_watermark(events, params, APP_ACTION.time_field), APP_ACTIONS_JOB, params,
                                    window_ms=params.slide_ms),
    })


APP_ACTIONS_JOB = Job(
    name="app-actions",
    summary="mobile-app actions per type, 1 h windows sliding every 5 min, upserted (update mode)",
    schema=APP_ACTION,
    pipeline=app_actions_pipeline,
    outputs={
        "counts": Output("counts", "actions per type per --sliding-window (1h) every --slide (5min)",
                         (UPDATE, APPEND, COMPLETE), UPDATE, True, ("window_start", "window_end", "action")),
        "dead-letters": DEAD_LETTERS,
        "late": dataclasses.replace(LATE, summary=(
            "actions that arrived behind the watermark (no count includes them): window_start/window_end is the "
            "--slide step (5min) each fell in, which every count window covering that step misses; the watermark "
            "they missed; the copies that arrived")),
    },
    default_outputs=("counts",),
    dedup_key="id",
    default_source="generator://?kind=actions&rate=100",
    defaults={"sliding_window": "1h", "slide": "5min", "watermark": "10min"},
)
