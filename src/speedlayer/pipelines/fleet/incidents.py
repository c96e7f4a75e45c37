"""The fleet job's ``incidents`` output: speeding incidents per vehicle (see ``speedlayer.state.incidents``)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from speedlayer.pipelines.base import Params
from speedlayer.pipelines.fleet.groups import vehicle_group
from speedlayer.pipelines.fleet.options import fleet_options
from speedlayer.pipelines.ops import ready_for_state
from speedlayer.state.incidents import INCIDENT_SCHEMA, INPUT_COLUMNS, IncidentProcessor, IncidentRules, read_initial_state

#: vehicles are spread over this many groups, each one key of the processor's state; the number is
#: part of the checkpoint (another one reads none of the state it wrote)
INCIDENT_GROUPS = 16


def incident_group(vehicle: str | Column) -> Column:
    """The processor's grouping key: which of ``INCIDENT_GROUPS`` groups a vehicle belongs to.

    >>> pings.groupBy(incident_group("vehicle_id"))  # doctest: +SKIP
    """
    return vehicle_group(vehicle, INCIDENT_GROUPS)


def incident_rules(params: Params) -> IncidentRules:
    opts = fleet_options(params)
    return IncidentRules(opts.incident_after_ms, opts.incident_timeout_ms, opts.incident_updates)


def speeding_incidents(limited: DataFrame, params: Params) -> DataFrame:
    """Speeding incidents from deduplicated events that carry their zone's limit (``with_speed_limit``).

    On a stream each incident comes out when it closes (and with ``incident_updates`` while open);
    on a static DataFrame the end of input closes every incident still open (``closed_by`` timeout).

    >>> speeding_incidents(with_speed_limit(events, Params()), Params()).columns[:3]  # doctest: +SKIP
    ['vehicle_id', 'started_at', 'ended_at']
    """
    opts = fleet_options(params)
    pings = ready_for_state(limited).select(incident_group("vehicle_id"),
                           *(F.unix_millis("event_time").alias(c) if c == "event_ms" else F.col(c) for c in INPUT_COLUMNS))
    initial = None
    if opts.incident_initial_state:
        table = read_initial_state(limited.sparkSession, opts.incident_initial_state)
        initial = table.select(incident_group("vehicle_id"), "*").groupBy("_group")
    processor = IncidentProcessor(incident_rules(params), batch=not limited.isStreaming)
    return pings.groupBy("_group").transformWithStateInPandas(
        statefulProcessor=processor, outputStructType=INCIDENT_SCHEMA,
        outputMode="Update" if opts.incident_updates else "Append", timeMode="EventTime", initialState=initial,
    )
