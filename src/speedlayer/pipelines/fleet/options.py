"""The fleet job's own settings: zones, trips, count windows, incidents, allowed lateness, ride matching.

They are the job's options (``Job.options``): given as ``--option KEY=VALUE``, as their own flags
(``--trip-gap 10min``, which every job's options get), or under ``options:`` (or at the top) of a
config file. Durations stay as written (``"5min"``) so that a resume compares what the user gave;
the ``*_ms`` properties give milliseconds.

>>> FleetOptions(trip_gap="10min").trip_gap_ms
600000
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from speedlayer.core.durations import parse_duration, positive_duration
from speedlayer.core.errors import ConfigError


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


class FleetOptions(BaseModel):
    """What the fleet job reads besides the generic run settings (window, watermark, ...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    zones: str | None = Field(None, description="speed-limit zones CSV (default: the built-in table)")
    allowed_lateness: str | None = Field(
        None, description="windows: re-emit a closed window corrected by events up to this late (default off)")
    trip_gap: str = Field("5min", description="trips: a trip ends after this long without a ping")
    max_trip: str = Field("1h", description="trips: cut a trip at every multiple of this since the epoch, "
                                            "so no trip is longer")
    count_window: int = Field(20, description="count-windows: pings per window")
    incident_after: str = Field("10s", description="incidents: above the limit this long opens an incident")
    incident_timeout: str = Field("30s", description="incidents: a vehicle silent this long closes its incident")
    incident_updates: bool = Field(False, description="incidents: also emit open incidents as they change "
                                                      "(needs update mode)")
    incident_initial_state: str | None = Field(None, description="incidents: Parquet/CSV table of open incidents "
                                                                 "to start from")
    match_within: str = Field("10s", description="matches: a ping this close to the request time, either side")
    match_cell: float = Field(500.0, description="matches: grid cell size in metres, and the farthest a matching "
                                                 "ping is from the pickup")

    @field_validator("allowed_lateness", "trip_gap", "max_trip", "incident_after", "incident_timeout")
    @classmethod
    def _positive(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            positive_duration(value, _flag(info.field_name))
        return value

    @field_validator("match_within")
    @classmethod
    def _duration(cls, value: str, info: ValidationInfo) -> str:
        parse_duration(value, _flag(info.field_name))
        return value

    @field_validator("count_window")
    @classmethod
    def _pings(cls, value: int) -> int:
        if value <= 0:
            raise ConfigError(f"--count-window must be a number of pings of at least 1 (got {value}): "
                              "e.g. --count-window 20")
        return value

    #: milliseconds of each duration option (allowed lateness: 0 when off)
    allowed_lateness_ms = property(lambda self: parse_duration(self.allowed_lateness) if self.allowed_lateness else 0)
    trip_gap_ms = property(lambda self: parse_duration(self.trip_gap))
    max_trip_ms = property(lambda self: parse_duration(self.max_trip))
    incident_after_ms = property(lambda self: parse_duration(self.incident_after))
    incident_timeout_ms = property(lambda self: parse_duration(self.incident_timeout))
    match_within_ms = property(lambda self: parse_duration(self.match_within))
    match_cell_m = property(lambda self: self.match_cell)


def fleet_options(params) -> FleetOptions:
    """The fleet options of a run's ``Params`` (the defaults when it has none, e.g. ``Params()`` in a test).

    >>> from speedlayer.pipelines.base import Params
    >>> fleet_options(Params()).trip_gap
    '5min'
    """
    return params.options if isinstance(params.options, FleetOptions) else FleetOptions()
