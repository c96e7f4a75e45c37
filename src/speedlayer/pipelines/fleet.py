"""The fleet job: per-vehicle speed windows, sliding averages and over-speed alerts.

Pure DataFrame functions: the same code runs on a static DataFrame (tests, backfills) and on a
stream. Re-sent events are dropped by ``event_id`` before anything is counted (``speedlayer.pipelines.dedup``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.decode import Decoded
from speedlayer.durations import spark_interval
from speedlayer.errors import ConfigError
from speedlayer.pipelines.base import APPEND, COMPLETE, DEAD_LETTERS, UPDATE, Job, LazyOutputs, Output, Params
from speedlayer.pipelines.dedup import drop_duplicates
from speedlayer.pipelines.incidents import speeding_incidents
from speedlayer.pipelines.late import late_events
from speedlayer.schemas import RIDE_REQUEST, VEHICLE_EVENT
from speedlayer.zones import load_zones, zone_of


def with_watermark(events: DataFrame, params: Params, column: str = "event_time", extra_ms: int = 0) -> DataFrame:
    """Event-time watermark on ``column`` (none on a static DataFrame or in continuous mode).

    ``extra_ms`` lengthens Spark's delay beyond ``params.watermark_ms`` (windows with allowed lateness).
    """
    if not events.isStreaming or params.continuous:
        return events
    return events.withWatermark(column, spark_interval(params.watermark_ms + extra_ms))


def drop_duplicate_events(events: DataFrame, params: Params, key: str = "event_id") -> DataFrame:
    """Drop re-sent events by ``key``, the lowest offset counting (``speedlayer.pipelines.dedup``)."""
    return drop_duplicates(events, params, key)


def with_speed_limit(events: DataFrame, params: Params) -> DataFrame:
    """Add zone_id, zone_name and speed_limit_kmh of the zone each event is in."""
    zone_id, zone_name, limit = zone_of(F.col("lat"), F.col("lon"), load_zones(params.zones))
    return events.select("*", zone_id.alias("zone_id"), zone_name.alias("zone_name"), limit.alias("speed_limit_kmh"))


def _flatten_window(df: DataFrame) -> DataFrame:
    return df.select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                     *[c for c in df.columns if c != "window"])


def speed_windows(events: DataFrame, params: Params) -> DataFrame:
    """Tumbling windows per vehicle: events, average and max speed, events over the limit.

    >>> speed_windows(events_df, Params(window_ms=10_000)).columns  # doctest: +SKIP
    ['window_start', 'window_end', 'vehicle_id', 'events', 'avg_speed_kmh', 'max_speed_kmh', 'over_limit_events']
    """
    over = (F.col("speed_kmh") > F.col("speed_limit_kmh")).cast("int")
    return _flatten_window(
        with_speed_limit(events, params)
        .groupBy(F.window("event_time", spark_interval(params.window_ms)), "vehicle_id")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.avg("speed_kmh").alias("avg_speed_kmh"),
            F.max("speed_kmh").alias("max_speed_kmh"),
            F.coalesce(F.sum(over), F.lit(0)).cast("long").alias("over_limit_events"),
        )
    )


def windows_with_lateness(events: DataFrame, params: Params) -> DataFrame:
    """``speed_windows`` plus a ``revision``, with closed windows corrected by events up to
    ``params.allowed_lateness_ms`` behind the watermark (see ``speedlayer.state.lateness``).

    Takes decoded events without a watermark: this query's Spark watermark is watermark + lateness,
    so that Spark does not drop the events the windows may still take. A static DataFrame has no
    late events: every window is revision 0.

    >>> windows_with_lateness(decoded.events, Params(allowed_lateness_ms=30_000)).columns[-1]  # doctest: +SKIP
    'revision'
    """
    if not events.isStreaming:
        return speed_windows(drop_duplicate_events(events, params), params).withColumn("revision", F.lit(0).cast("long"))
    from speedlayer.pipelines.lateness import corrected_windows

    lenient = drop_duplicate_events(with_watermark(events, params, extra_ms=params.allowed_lateness_ms), params)
    return corrected_windows(with_speed_limit(lenient, params), params)


def sliding_averages(events: DataFrame, params: Params) -> DataFrame:
    """Sliding windows per vehicle (default 1 min every 10 s): events and average speed."""
    window = F.window("event_time", spark_interval(params.sliding_window_ms), spark_interval(params.slide_ms))
    return _flatten_window(
        events.groupBy(window, "vehicle_id").agg(
            F.count(F.lit(1)).alias("events"), F.avg("speed_kmh").alias("avg_speed_kmh")
        )
    )


def overspeed_alerts(events: DataFrame, params: Params) -> DataFrame:
    """One alert per event faster than its zone's limit; stateless, so it runs in continuous mode too."""
    return (
        with_speed_limit(events, params)
        .where(F.col("speed_kmh") > F.col("speed_limit_kmh"))
        .select(
            "event_id", "vehicle_id", "event_time", "speed_kmh", "speed_limit_kmh",
            F.round(F.col("speed_kmh") - F.col("speed_limit_kmh"), 1).alias("excess_kmh"),
            "zone_id", "zone_name", "lat", "lon",
        )
    )


def fleet_pipeline(events: DataFrame, params: Params, rides: Decoded | None = None) -> Mapping[str, DataFrame]:
    """All outputs of the fleet job from decoded vehicle events (and decoded ride requests, for ``matches``).

    >>> outputs = fleet_pipeline(decoded.events, Params(), rides=decode(raw_requests, RIDE_REQUEST))  # doctest: +SKIP
    >>> sorted(outputs)                                      # doctest: +SKIP
    ['alerts', 'congestion', 'count-windows', 'incidents', 'late', 'matches', 'sliding', 'trips', 'windows']
    """
    watermarked = with_watermark(events, params)
    clean = drop_duplicate_events(watermarked, params)
    outputs = {
        "windows": (lambda: windows_with_lateness(events, params)) if params.allowed_lateness_ms
        else (lambda: speed_windows(clean, params)),
        "sliding": lambda: sliding_averages(clean, params),
        "alerts": lambda: overspeed_alerts(clean, params),
    }
    if not params.continuous:  # the outputs below keep state, which continuous mode has none of
        from speedlayer.pipelines.congestion import zone_congestion
        from speedlayer.pipelines.count_windows import count_windows
        from speedlayer.pipelines.trips import trips

        outputs.update({
            "trips": lambda: trips(clean, params),
            "congestion": lambda: zone_congestion(clean, params),
            "count-windows": lambda: count_windows(clean, params),
            "incidents": lambda: speeding_incidents(with_speed_limit(clean, params), params),
            # late events are judged before dedup, as Spark's own watermark filter sees them
            "late": lambda: late_events(watermarked, params),  # behind watermark + allowed lateness
            "matches": lambda: _matches(clean, rides, params),
        })
    return LazyOutputs(outputs)


#: the fleet windows' key; with allowed lateness a window is written once per revision
WINDOW_KEY = ("window_start", "window_end", "vehicle_id")


def _windows_with_lateness(output: Output, params: Params) -> Output:
    """With --allowed-lateness, windows are re-emitted as corrections: update by default, no complete mode."""
    if not params.allowed_lateness_ms:
        return output
    return dataclasses.replace(
        output, modes=(UPDATE, APPEND), default_mode=UPDATE, append_key=WINDOW_KEY + ("revision",), configure=None,
        modes_note="with --allowed-lateness a window is re-emitted as corrections: update replaces it by "
                   "(window_start, window_end, vehicle_id), append keeps every revision")


def _matches(pings: DataFrame, rides: Decoded | None, params: Params) -> DataFrame:
    from speedlayer.pipelines.matching import ride_matches

    if rides is None:
        raise ConfigError("output 'matches' joins ride requests: give their source with --rides URI")
    return ride_matches(pings, rides.events, params)


def _check_matching(params: Params) -> None:
    from speedlayer.pipelines.matching import check_matching

    check_matching(params)


def _check_trip_gap(params: Params) -> None:  # state-windows
    from speedlayer.pipelines.trips import check_trip_gap

    check_trip_gap(params)


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
        "trips": Output("trips", "per-vehicle trips (session windows, --trip-gap): duration, distance, avg/max speed",
                        (APPEND, COMPLETE), APPEND, True, ("vehicle_id", "trip_start"), check=_check_trip_gap),
        "congestion": Output("congestion", "average speed per speed-limit zone per minute",
                             (UPDATE, COMPLETE, APPEND), UPDATE, True, ("window_start", "window_end", "zone_id")),
        "count-windows": Output("count-windows", "per-vehicle average speed over every --count-window pings",
                                (APPEND,), APPEND, True, ("vehicle_id", "window_index")),
        # --- end state-windows ---
        # --- speeding incidents (issue 4: incidents) ---
        "incidents": Output("incidents", "per-vehicle speeding incidents: opened after --incident-after above the limit, "
                            "emitted when they close (speed back under the limit, or silent for --incident-timeout)",
                            (APPEND, UPDATE), APPEND, True, ("vehicle_id", "started_at")),
        # --- late events, kept (issue 4: late data) ---
        "late": Output("late", "events that arrived behind the watermark (the windows drop them): the window they "
                       "belonged to and the watermark they missed", (APPEND, UPDATE), APPEND, True,
                       ("event_id", "missed_watermark")),
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
    inputs={"rides": RIDE_REQUEST},
)
