"""The fleet job: assembles its outputs (windows, alerts, incidents, trips, ...) from the modules beside it.

Each output is a pure DataFrame function in its own module (``windows``, ``trips``, ``congestion``,
...): the same code runs on a static DataFrame (tests, backfills) and on a stream. Re-sent events
are dropped by ``event_id`` (``FLEET.dedup_key``) before anything is counted
(``speedlayer.pipelines.dedup``). The helpers never import this module; it imports them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import DataFrame

from speedlayer.core.errors import ConfigError
from speedlayer.core.modes import APPEND, COMPLETE, UPDATE
from speedlayer.core.tables import TableRef
from speedlayer.decode.validate import Decoded
from speedlayer.pipelines.base import DEAD_LETTERS, LATE, Job, LazyOutputs, Output, Params, Positions
from speedlayer.pipelines.fleet.incidents import check_initial_state, speeding_incidents
from speedlayer.pipelines.fleet.options import FleetOptions, fleet_options
from speedlayer.pipelines.fleet.schemas import RIDE_REQUEST, VEHICLE_EVENT
from speedlayer.pipelines.fleet.windows import (
    drop_duplicate_events,
    overspeed_alerts,
    sliding_averages,
    speed_windows,
    windows_with_lateness,
    with_speed_limit,
)
from speedlayer.pipelines.fleet.zones import ZONES_DDL, zones_file
from speedlayer.pipelines.late import late_events
from speedlayer.pipelines.ops import with_watermark


def fleet_pipeline(events: DataFrame, params: Params, rides: Decoded | None = None) -> Mapping[str, DataFrame]:
    """All outputs of the fleet job from decoded vehicle events (and decoded ride requests, for ``matches``).

    >>> outputs = fleet_pipeline(decoded.events, Params(), rides=decode(raw_requests, RIDE_REQUEST))  # doctest: +SKIP
    >>> sorted(outputs)                                      # doctest: +SKIP
    ['alerts', 'congestion', 'count-windows', 'incidents', 'late', 'matches', 'sliding', 'trips', 'windows']
    """
    watermarked = with_watermark(events, params)
    clean = drop_duplicate_events(watermarked, params, FLEET.dedup_key)
    outputs = {
        "windows": (lambda: windows_with_lateness(events, params)) if fleet_options(params).allowed_lateness_ms
        else (lambda: speed_windows(clean, params)),
        "sliding": lambda: sliding_averages(clean, params),
        "alerts": lambda: overspeed_alerts(clean, params),
    }
    if not params.stateless:  # the outputs below keep state, which continuous and real-time mode have none of
        from speedlayer.pipelines.fleet.congestion import zone_congestion
        from speedlayer.pipelines.fleet.count_windows import count_windows
        from speedlayer.pipelines.fleet.trips import trips

        outputs.update({
            "trips": lambda: trips(clean, params),
            "congestion": lambda: zone_congestion(clean, params),
            "count-windows": lambda: count_windows(clean, params),
            "incidents": lambda: speeding_incidents(with_speed_limit(clean, params), params),
            # late events are judged before dedup, as Spark's own watermark filter sees them
            # behind watermark + allowed lateness
            "late": lambda: late_events(watermarked, FLEET, params, lateness_ms=fleet_options(params).allowed_lateness_ms),
            "matches": lambda: _matches(clean, rides, params),
        })
    return LazyOutputs(outputs)


#: the fleet windows' key; with allowed lateness a window is written once per revision
WINDOW_KEY = ("window_start", "window_end", "vehicle_id")


def _windows_with_lateness(output: Output, params: Params) -> Output:
    """With --allowed-lateness, windows are re-emitted as corrections: update by default, no complete mode."""
    if not fleet_options(params).allowed_lateness_ms:
        return output
    return dataclasses.replace(
        output, modes=(UPDATE, APPEND), default_mode=UPDATE, append_key=WINDOW_KEY + ("revision",), configure=None,
        modes_note="with --allowed-lateness a window is re-emitted as corrections: update replaces it by "
                   "(window_start, window_end, vehicle_id), append keeps every revision")


def _matches(pings: DataFrame, rides: Decoded | None, params: Params) -> DataFrame:
    from speedlayer.pipelines.fleet.matching import ride_matches

    if rides is None:
        raise ConfigError("output 'matches' joins ride requests: give their source with --rides URI")
    return ride_matches(pings, rides.events, params)


def _check_matching(params: Params, mode: str) -> None:
    from speedlayer.pipelines.fleet.matching import check_matching

    check_matching(params)


def _check_trip_gap(params: Params, mode: str) -> None:
    from speedlayer.pipelines.fleet.trips import check_trip_gap

    check_trip_gap(params)


def _check_incidents(params: Params, mode: str) -> None:
    """An initial-state table with the columns the processor needs; --incident-updates in update mode."""
    opts = fleet_options(params)
    if opts.incident_initial_state:
        check_initial_state(opts.incident_initial_state)
    if opts.incident_updates and mode != UPDATE:
        raise ConfigError("--incident-updates emits an open incident more than once: write it in update mode "
                          "(--output-mode incidents=update) to a sink that replaces rows by key (postgresql, mysql, console)")


def _zone_areas(params: Params) -> list[dict]:
    """The speed-limit zones, drawn under the vehicles on the dashboard's map."""
    from speedlayer.pipelines.fleet.zones import load_zones

    return [dict(vars(z)) for z in load_zones(fleet_options(params).zones)]


def _tables(params: Params) -> dict[str, TableRef]:
    """The speed-limit zones the alerts look up, for ``speedlayer sql``."""
    return {"zones": TableRef("csv", str(zones_file(fleet_options(params).zones)), {"header": "true"}, ZONES_DDL)}


def _shared_paths(params: Params) -> dict[str, Path]:
    """The incidents' initial-state table, when it is a local path: executors read it."""
    initial = fleet_options(params).incident_initial_state
    return {"--incident-initial-state": Path(initial).resolve()} if initial and "://" not in initial else {}


FLEET = Job(
    name="fleet",
    summary="ride-hailing fleet: speed windows, alerts, incidents, trips, congestion, count windows, late events, ride matches",
    schema=VEHICLE_EVENT,
    pipeline=fleet_pipeline,
    outputs={
        "windows": Output("windows", "per-vehicle tumbling windows: events, avg/max speed, events over the limit",
                          (APPEND, UPDATE, COMPLETE), APPEND, True, WINDOW_KEY, configure=_windows_with_lateness),
        "sliding": Output("sliding", "per-vehicle sliding-window average speed",
                          (APPEND, UPDATE, COMPLETE), APPEND, True, ("window_start", "window_end", "vehicle_id")),
        "alerts": Output("alerts", "events faster than their zone's speed limit",
                         (APPEND, UPDATE), APPEND, False, ("event_id",)),
        "dead-letters": DEAD_LETTERS,
        # --- trips, congestion, count windows (state-windows) ---
        "trips": Output("trips", "per-vehicle trips (ended by --trip-gap without a ping, or --max-trip): duration, "
                        "distance, avg/max speed", (APPEND,), APPEND, True, ("vehicle_id", "trip_start"), check=_check_trip_gap,
                        modes_note="each trip is written once, when it ends; its state keeps no trip that has ended"),
        "congestion": Output("congestion", "average speed per speed-limit zone per minute",
                             (UPDATE, COMPLETE, APPEND), UPDATE, True, ("window_start", "window_end", "zone_id")),
        "count-windows": Output("count-windows", "per-vehicle average speed over every --count-window pings",
                                (APPEND,), APPEND, True, ("vehicle_id", "window_index")),
        # --- end state-windows ---
        # --- speeding incidents ---
        "incidents": Output("incidents", "per-vehicle speeding incidents: opened after --incident-after above the limit, "
                            "emitted when they close (speed back under the limit, or silent for --incident-timeout)",
                            (APPEND, UPDATE), APPEND, True, ("vehicle_id", "started_at"), check=_check_incidents),
        # --- late events, kept ---
        "late": LATE,  # keyed by (event_id, missed_watermark)
        # --- ride matching ---
        "matches": Output("matches", "candidate vehicles per ride request (--rides): pings within --match-cell metres "
                          "of the pickup and --match-within of the request time (stream-stream join)",
                          (APPEND,), APPEND, True, ("request_id", "vehicle_id", "ping_time"), check=_check_matching,
                          inputs=("rides",)),
        "ride-dead-letters": Output("ride-dead-letters", "ride requests (--rides) that failed to parse or validate, "
                                    "with the reason", (APPEND, UPDATE), APPEND, False, ("offset",),
                                    inputs=("rides",), dead_letters_of="rides"),
    },
    default_outputs=("windows", "alerts"),
    default_source="generator://",
    dedup_key="event_id",
    inputs={"rides": RIDE_REQUEST},
    options=FleetOptions,
    shared_paths=_shared_paths,
    positions=Positions("vehicle_id", areas=_zone_areas),
    tables=_tables,
)
