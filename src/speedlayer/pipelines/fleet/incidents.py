"""The fleet's ``incidents`` output: a state machine per vehicle, run by ``transformWithStateInPandas`` per group of vehicles.

An incident opens once a vehicle has stayed above its zone's speed limit for ``after_ms``
(first to latest over-limit ping), tracks the top speed and the distance driven (haversine over
consecutive pings), and closes when a ping comes back at or under the limit (``closed_by``
``speed``) or when the vehicle sends nothing for ``timeout_ms`` (``timeout``: an event-time timer,
the "event that signals the end was lost" case). It is emitted once when it closes, and with
``updates`` also while open (``status`` ``open``; same key, so an upserting sink keeps the newest).

Pings are applied in event-time order, whatever order they arrive in: a ping waits in state until
the watermark passes it, then joins the track. That is what makes the result independent of how
the stream is cut into micro-batches, and equal to the same processor run once over a static
DataFrame (where every ping of a vehicle arrives in one call and the end of input closes what is
still open). The rules themselves are ``speedlayer.pipelines.fleet.incident_track``;
``speeding_incidents`` runs the processor::

    events.groupBy(incident_group("vehicle_id")).transformWithStateInPandas(
        IncidentProcessor(IncidentRules()), INCIDENT_SCHEMA, "Append", "EventTime")
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import TimerValues

from speedlayer.core.errors import ConfigError
from speedlayer.pipelines.base import Params
from speedlayer.pipelines.fleet.groups import GroupProcessor, vehicle_group, vehicle_runs
from speedlayer.pipelines.fleet.incident_track import IncidentRules, Pings, Track, advance, tracks_from_table, tracks_to_table
from speedlayer.pipelines.fleet.options import fleet_options
from speedlayer.pipelines.ops import ready_for_state

#: what the processor reads from each ping (``event_ms`` is ``event_time`` in epoch milliseconds)
INPUT_COLUMNS = ("vehicle_id", "event_time", "event_ms", "speed_kmh", "speed_limit_kmh", "lat", "lon", "zone_id")

INCIDENT_SCHEMA = T.StructType([
    T.StructField("vehicle_id", T.StringType()),
    T.StructField("started_at", T.TimestampType()),     # first ping above the limit
    T.StructField("ended_at", T.TimestampType()),       # latest ping above the limit
    T.StructField("duration_s", T.DoubleType()),
    T.StructField("zone_id", T.StringType()),           # zone of the first ping
    T.StructField("max_speed_kmh", T.DoubleType()),
    T.StructField("max_excess_kmh", T.DoubleType()),    # most km/h above the limit of the ping's zone
    T.StructField("distance_km", T.DoubleType()),       # driven between the first and the latest ping
    T.StructField("pings", T.LongType()),
    T.StructField("status", T.StringType()),            # open | closed
    T.StructField("closed_by", T.StringType()),         # speed | timeout (null while open)
    T.StructField("closed_at", T.TimestampType()),      # event time it became known closed
    T.StructField("last_lat", T.DoubleType()),
    T.StructField("last_lon", T.DoubleType()),
])
OUTPUT_COLUMNS = tuple(f.name for f in INCIDENT_SCHEMA.fields)
_TIME_COLUMNS = ("started_at", "ended_at", "closed_at")

#: an initial-state table holds open incidents in the output's own columns (closed ones are skipped)
INITIAL_STATE_COLUMNS = ("vehicle_id", "started_at", "ended_at", "zone_id", "max_speed_kmh", "max_excess_kmh",
                         "distance_km", "pings", "last_lat", "last_lon")

#: one state value per group of vehicles: their tracks and waiting pings (Arrow IPC), and the group's timer
GROUP_STATE_SCHEMA = "tracks binary, pending binary, timer_ms long"
_PENDING = pa.schema([("vehicle_id", pa.string()), ("event_ms", pa.int64()), ("speed_kmh", pa.float64()),
                      ("excess_kmh", pa.float64()), ("lat", pa.float64()), ("lon", pa.float64()),
                      ("zone_id", pa.string())])


def _frame(rows: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(OUTPUT_COLUMNS))
    for name in _TIME_COLUMNS:
        df[name] = pd.to_datetime(df[name], unit="ms")
    df["pings"] = df["pings"].astype("int64")
    return df


def _arrived(pings: pd.DataFrame) -> pd.DataFrame:
    """The processor's input rows as pending pings (columns of ``_PENDING``)."""
    return pd.DataFrame({
        "vehicle_id": pings["vehicle_id"].astype(object), "event_ms": pings["event_ms"].astype("int64"),
        "speed_kmh": pings["speed_kmh"].astype(float),
        "excess_kmh": (pings["speed_kmh"] - pings["speed_limit_kmh"]).astype(float),
        "lat": pings["lat"].astype(float), "lon": pings["lon"].astype(float), "zone_id": pings["zone_id"],
    })


def _first_waiting(waiting: pd.DataFrame) -> dict[str, int]:
    """Each vehicle's oldest waiting ping (event ms), for the vehicles that have one."""
    return waiting.groupby("vehicle_id", sort=False)["event_ms"].min().to_dict() if len(waiting) else {}


def _by_vehicle(pings: pd.DataFrame):
    """(vehicle, Pings) for each vehicle of ``pings``, which is sorted by vehicle, then event time."""
    vehicles = pings["vehicle_id"].to_numpy()
    cols = [pings[c].to_numpy() for c in ("event_ms", "speed_kmh", "excess_kmh", "lat", "lon", "zone_id")]
    for a, b in vehicle_runs(vehicles):
        yield vehicles[a], Pings(*(c[a:b] for c in cols))


class IncidentProcessor(GroupProcessor):
    """The incidents state machine for ``transformWithStateInPandas`` in EventTime mode, per group of vehicles.

    The grouping key is a group of vehicles (``incident_group``), not one vehicle: each call gets
    the rows of many vehicles as one pandas frame and reads and writes one state value, so the
    per-key cost of the Python state API is paid per group. Every call moves every vehicle of its
    group on to the current watermark.

    ``batch=True`` is for a static DataFrame, where all pings of a group come in one call and the
    watermark does not move: every ping is applied at once and the end of input closes what is open.

    Idle state expires in event time: once the watermark passes a vehicle's newest ping plus the
    timeout, its track is dropped. (Spark's own state TTL is processing-time based and
    refused in EventTime mode: STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_ASSIGN_TTL.)
    """

    STATE_SCHEMA = GROUP_STATE_SCHEMA
    PENDING = _PENDING
    rules: IncidentRules

    _arrived = staticmethod(_arrived)
    _frame = staticmethod(_frame)

    # --- state ---------------------------------------------------------------------------------
    def _load(self) -> tuple[dict[str, Track], pd.DataFrame, int | None]:
        tracks, waiting, timer_ms = self._load_group(tracks_from_table)
        return tracks or {}, waiting, timer_ms

    def _save(self, tracks: dict[str, Track], waiting: pd.DataFrame, timer_ms: int | None, watermark_ms: int,
              first_waiting: dict[str, int]) -> None:
        """Store the tracks and the pings still waiting (``first_waiting``: ``_first_waiting(waiting)``), and
        keep exactly one timer: the next moment to act."""
        if not tracks:
            return self._store(None, timer_ms, 0, watermark_ms)
        due = min(first_waiting.get(v, t.seen_ms + self.rules.timeout_ms) for v, t in tracks.items())
        self._save_group(tracks_to_table(tracks), waiting, timer_ms, due, watermark_ms)

    # --- the state machine ----------------------------------------------------------------------
    def _step(self, arrived: pd.DataFrame | None, watermark_ms: int, timer_fired: bool) -> list[tuple]:
        tracks, waiting, timer_ms = self._load()
        if timer_fired:
            timer_ms = None  # Spark removes a timer once it fired
        if arrived is not None and not arrived.empty:
            # A ping not after its vehicle's last applied one comes too late to be put in order: skip it.
            last = arrived["vehicle_id"].map({v: t.last_ms for v, t in tracks.items() if t.last_ms is not None})
            arrived = arrived[last.isna().to_numpy() | (arrived["event_ms"] > last).to_numpy()]
            for vehicle, newest in arrived.groupby("vehicle_id", sort=False)["event_ms"].max().items():
                track = tracks.setdefault(vehicle, Track())
                track.seen_ms = max(track.seen_ms or 0, int(newest))
            waiting = pd.concat([waiting, arrived], ignore_index=True) if len(waiting) else arrived
        waiting = waiting.sort_values(["vehicle_id", "event_ms"], kind="stable")
        due = waiting["event_ms"].to_numpy() <= watermark_ms
        out: list[tuple] = []
        for vehicle, pings in _by_vehicle(waiting[due]):
            out += advance(self.rules, vehicle, tracks[vehicle], pings)
        waiting = waiting[~due]
        first_waiting = _first_waiting(waiting)
        for vehicle, track in list(tracks.items()):
            if vehicle not in first_waiting and watermark_ms >= track.seen_ms + self.rules.timeout_ms:
                if track.opened:  # silent for the timeout: the event that ends it never came
                    out.append(track.incident(vehicle, "timeout", track.seen_ms + self.rules.timeout_ms))
                del tracks[vehicle]
            elif self.rules.updates and track.opened and track.emitted_ms != track.run_last_ms:
                out.append(track.incident(vehicle, None, None))
                track.emitted_ms = track.run_last_ms
        self._save(tracks, waiting, timer_ms, watermark_ms, first_waiting)
        return out

    def _static(self, arrived: pd.DataFrame) -> list[tuple]:
        """A static DataFrame: every ping at once; the end of input closes what is open."""
        out: list[tuple] = []
        for vehicle, pings in _by_vehicle(arrived.sort_values(["vehicle_id", "event_ms"], kind="stable")):
            track = Track()
            out += advance(self.rules, vehicle, track, pings)
            if track.opened:
                out.append(track.incident(vehicle, "timeout", track.last_ms + self.rules.timeout_ms))
        return out

    def handleInitialState(self, key: Any, initialState: pd.DataFrame, timerValues: TimerValues) -> None:
        """Open incidents carried over from a table: each vehicle resumes inside its latest one."""
        tracks, waiting, timer_ms = self._load()
        for _, row in initialState.sort_values("started_at").groupby("vehicle_id", sort=False).tail(1).iterrows():
            started, ended = _millis(row["started_at"]), _millis(row["ended_at"])
            tracks[row["vehicle_id"]] = Track(
                last_ms=ended, last_lat=float(row["last_lat"]), last_lon=float(row["last_lon"]), seen_ms=ended,
                run_start_ms=started, run_last_ms=ended, run_zone=row["zone_id"], run_max=float(row["max_speed_kmh"]),
                run_excess=float(row["max_excess_kmh"]), run_km=float(row["distance_km"]), run_pings=int(row["pings"]),
                opened=True, emitted_ms=ended)
        self._save(tracks, waiting, timer_ms, timerValues.getCurrentWatermarkInMs(), _first_waiting(waiting))


def _millis(value: Any) -> int:
    return int(pd.Timestamp(value).value // 1_000_000)


# --- the initial-state table ---------------------------------------------------------------------

def initial_state_columns(path: str) -> list[str]:
    """The column names of an initial-state table (Parquet file or directory, or CSV with a header).

    Read without Spark, so a wrong table is refused before anything starts.
    """
    where = Path(path)
    if not where.exists():
        raise ConfigError(f"incident initial state {path}: no such file or directory: "
                          "give a Parquet or CSV table of open incidents")
    if where.suffix.lower() == ".csv":
        with where.open(newline="") as handle:
            return [name.strip() for name in next(csv.reader(handle), [])]
    import pyarrow.dataset as ds

    try:
        return list(ds.dataset(str(where), format="parquet").schema.names)
    except Exception as exc:  # noqa: BLE001 — any unreadable table gets the same one-line advice
        raise ConfigError(f"incident initial state {path} is not a readable Parquet table ({type(exc).__name__}): "
                          "give a Parquet file/directory or a .csv file") from None


def check_initial_state(path: str) -> None:
    """Refuse a table that lacks a column the processor needs, naming what fits."""
    missing = [c for c in INITIAL_STATE_COLUMNS if c not in initial_state_columns(path)]
    if missing:
        raise ConfigError(f"incident initial state {path} lacks column(s) {', '.join(missing)}: it needs "
                          f"{', '.join(INITIAL_STATE_COLUMNS)} "
                          "(the incidents output's columns; rows with status 'closed' are skipped)")


def read_initial_state(spark, path: str):
    """The open incidents of an initial-state table as a DataFrame with typed INITIAL_STATE_COLUMNS."""
    from pyspark.sql import functions as F

    is_csv = Path(path).suffix.lower() == ".csv"
    table = spark.read.option("header", True).csv(path) if is_csv else spark.read.parquet(path)
    if "status" in table.columns:
        table = table.where(F.col("status").isNull() | (F.col("status") != "closed"))
    types = {f.name: f.dataType for f in INCIDENT_SCHEMA.fields}
    return table.select(*(F.col(c).cast(types[c]).alias(c) for c in INITIAL_STATE_COLUMNS))


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
