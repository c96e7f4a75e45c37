"""What a job is: an event schema to decode, a pure pipeline function, and its named outputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from pyspark.sql import DataFrame

from speedlayer.schemas import EventSchema

APPEND, UPDATE, COMPLETE = "append", "update", "complete"
OUTPUT_MODES = (APPEND, UPDATE, COMPLETE)


@dataclass(frozen=True)
class Params:
    """Settings a pipeline reads; durations are in milliseconds."""

    window_ms: int = 10_000
    sliding_window_ms: int = 60_000
    slide_ms: int = 10_000
    watermark_ms: int = 5_000
    zones: str | None = None  # a zones CSV; None is the table shipped with the package
    #: continuous mode keeps no state: no watermark, and re-sent events are not dropped
    continuous: bool = False

    # --- trips, count windows (state-windows) ---
    trip_gap_ms: int = 300_000  # a trip ends after this long without a ping of its vehicle
    count_window: int = 20  # pings per count window
    # --- speeding incidents (issue 4: incidents) ---
    incident_after_ms: int = 10_000       # above the limit this long opens an incident
    incident_timeout_ms: int = 30_000     # silent this long closes it
    incident_updates: bool = False        # also emit open incidents as they change (update mode)
    incident_initial_state: str | None = None  # Parquet/CSV table of open incidents to start from


@dataclass(frozen=True)
class Output:
    """A named output: the modes it can be written in, and whether it needs state (no continuous)."""

    name: str
    summary: str
    modes: tuple[str, ...]
    default_mode: str
    stateful: bool
    #: the columns that identify a row (upserting sinks key on them)
    key: tuple[str, ...] = ()
    #: checks the settings this output depends on (raises ConfigError); the runner calls it for selected outputs
    check: Callable[[Params], None] | None = None


@dataclass(frozen=True)
class Job:
    """A job: ``pipeline(events, params)`` returns a DataFrame for each output except dead letters."""

    name: str
    summary: str
    schema: EventSchema
    pipeline: Callable[[DataFrame, Params], Mapping[str, DataFrame]]
    outputs: Mapping[str, Output]
    default_outputs: tuple[str, ...] = field(default=())


DEAD_LETTERS = Output(
    name="dead-letters",
    summary="payloads that failed to parse or validate, with the reason",
    modes=(APPEND, UPDATE),
    default_mode=APPEND,
    stateful=False,
    key=("offset",),
)
