"""Speeding incidents: a per-vehicle state machine run by ``transformWithStateInPandas``.

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
still open).

    events.groupBy("vehicle_id").transformWithStateInPandas(
        IncidentProcessor(IncidentRules()), INCIDENT_SCHEMA, "Append", "EventTime")
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues

from speedlayer.core.errors import ConfigError

EARTH_RADIUS_KM = 6371.0088

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


@dataclass(frozen=True)
class IncidentRules:
    """When incidents open and close; durations in milliseconds."""

    after_ms: int = 10_000
    timeout_ms: int = 30_000
    updates: bool = False


@dataclass
class Track:
    """One vehicle's state: its last applied ping, and the over-limit run it is in (if any)."""

    last_ms: int | None = None
    last_lat: float | None = None
    last_lon: float | None = None
    seen_ms: int | None = None      # newest event time received (applied or waiting)
    timer_ms: int | None = None     # the one timer registered for this vehicle
    run_start_ms: int | None = None
    run_last_ms: int | None = None
    run_zone: str | None = None
    run_max: float | None = None
    run_excess: float | None = None
    run_km: float | None = None
    run_pings: int | None = None
    opened: bool | None = None
    emitted_ms: int | None = None   # run_last_ms of the last "open" update sent

    SCHEMA = ("last_ms long, last_lat double, last_lon double, seen_ms long, timer_ms long, run_start_ms long, "
              "run_last_ms long, run_zone string, run_max double, run_excess double, run_km double, run_pings long, "
              "opened boolean, emitted_ms long")

    def end_run(self) -> None:
        for name in ("run_start_ms", "run_last_ms", "run_zone", "run_max", "run_excess", "run_km", "run_pings",
                     "opened", "emitted_ms"):
            setattr(self, name, None)

    def incident(self, vehicle: str, closed_by: str | None, closed_at_ms: int | None) -> tuple:
        """The output row of the current run."""
        return (vehicle, self.run_start_ms, self.run_last_ms, (self.run_last_ms - self.run_start_ms) / 1000.0,
                self.run_zone, self.run_max, self.run_excess, self.run_km, self.run_pings,
                "open" if closed_by is None else "closed", closed_by, closed_at_ms, self.last_lat, self.last_lon)


PENDING_SCHEMA = "event_ms long, speed_kmh double, excess_kmh double, lat double, lon double, zone_id string"


def haversine_km(lat1, lon1, lat2, lon2):
    """Great-circle distance in km (numpy arrays or floats).

    >>> round(float(haversine_km(52.52, 13.405, 52.52, 13.505)), 3)
    6.766
    """
    p1, p2 = np.radians(lat1), np.radians(lat2)
    dp, dl = p2 - p1, np.radians(np.asarray(lon2) - np.asarray(lon1))
    a = np.sin(dp / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(a))


def advance(rules: IncidentRules, vehicle: str, track: Track, pings: pd.DataFrame) -> list[tuple]:
    """Apply pings (columns of PENDING_SCHEMA, sorted by ``event_ms``) to ``track``; return closed incidents.

    Works block by block (a block: consecutive pings on the same side of the limit with no silence
    longer than the timeout inside), with numpy doing the per-ping arithmetic.
    """
    closed: list[tuple] = []
    if pings.empty:
        return closed
    t = pings["event_ms"].to_numpy(np.int64)
    lat, lon = pings["lat"].to_numpy(float), pings["lon"].to_numpy(float)
    over = pings["excess_kmh"].to_numpy(float) > 0
    prev_t = np.concatenate(([track.last_ms if track.last_ms is not None else t[0]], t[:-1]))
    prev_lat = np.concatenate(([track.last_lat if track.last_ms is not None else lat[0]], lat[:-1]))
    prev_lon = np.concatenate(([track.last_lon if track.last_ms is not None else lon[0]], lon[:-1]))
    silence = (t - prev_t) > rules.timeout_ms  # the vehicle was silent longer than the timeout before this ping
    step_km = np.where(silence, 0.0, haversine_km(prev_lat, prev_lon, lat, lon))
    starts = np.flatnonzero(np.concatenate(([True], (over[1:] != over[:-1]) | silence[1:])))
    ends = np.concatenate((starts[1:], [len(t)]))
    for a, b in zip(starts, ends):
        if silence[a]:
            if track.opened:
                closed.append(track.incident(vehicle, "timeout", track.last_ms + rules.timeout_ms))
            track.end_run()
        if over[a]:
            block = pings.iloc[a:b]
            if track.run_start_ms is None:
                track.run_start_ms, track.run_zone, track.run_km, track.run_pings = int(t[a]), block["zone_id"].iat[0], 0.0, 0
                track.run_max = track.run_excess = -np.inf
                km = step_km[a + 1:b].sum()
            else:  # the run goes on from the previous call's last ping
                km = step_km[a:b].sum()
            track.run_km = float(track.run_km + km)
            track.run_pings += int(b - a)
            track.run_max = float(max(track.run_max, block["speed_kmh"].max()))
            track.run_excess = float(max(track.run_excess, block["excess_kmh"].max()))
            track.run_last_ms = int(t[b - 1])
            track.opened = track.run_last_ms - track.run_start_ms >= rules.after_ms
        elif track.run_start_ms is not None:
            if track.opened:
                closed.append(track.incident(vehicle, "speed", int(t[a])))
            track.end_run()
        track.last_ms, track.last_lat, track.last_lon = int(t[b - 1]), float(lat[b - 1]), float(lon[b - 1])
    return closed


def _frame(rows: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(OUTPUT_COLUMNS))
    for name in _TIME_COLUMNS:
        df[name] = pd.to_datetime(df[name], unit="ms")
    df["pings"] = df["pings"].astype("int64")
    return df


def _pending_frame(rows) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=["event_ms", "speed_kmh", "excess_kmh", "lat", "lon", "zone_id"])


class IncidentProcessor(StatefulProcessor):
    """The incidents state machine per vehicle, for ``transformWithStateInPandas`` in EventTime mode.

    ``batch=True`` is for a static DataFrame, where all pings of a vehicle come in one call and the
    watermark does not move: every ping is applied at once and the end of input closes what is open.

    Idle state expires in event time: once the watermark passes a vehicle's newest ping plus the
    timeout, its state and timer are deleted. (Spark's own state TTL is processing-time based and
    refused in EventTime mode: STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_ASSIGN_TTL.)
    """

    def __init__(self, rules: IncidentRules, batch: bool = False):
        self.rules, self.batch = rules, batch

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.track_state = handle.getValueState("track", Track.SCHEMA)
        self.pending = handle.getListState("pending", PENDING_SCHEMA)

    # --- state ---------------------------------------------------------------------------------
    def _load(self) -> Track:
        value = self.track_state.get()
        return Track(*value) if value is not None else Track()

    def _save(self, track: Track, waiting: pd.DataFrame, watermark_ms: int) -> None:
        """Store the track and the pings still waiting, and keep exactly one timer: the next moment to act."""
        due = int(waiting["event_ms"].min()) if not waiting.empty else track.seen_ms + self.rules.timeout_ms
        due = max(due, watermark_ms + 1)  # Spark refuses a timer that is not after the watermark
        if track.timer_ms != due:
            if track.timer_ms is not None:
                self.handle.deleteTimer(track.timer_ms)
            self.handle.registerTimer(due)
            track.timer_ms = due
        self.track_state.update(astuple(track))
        if waiting.empty:
            self.pending.clear()
        else:
            self.pending.put(list(waiting.itertuples(index=False, name=None)))

    def _forget(self, track: Track) -> None:
        if track.timer_ms is not None:
            self.handle.deleteTimer(track.timer_ms)
        self.track_state.clear()
        self.pending.clear()

    # --- the state machine ----------------------------------------------------------------------
    def _step(self, vehicle: str, track: Track, arrived: pd.DataFrame, watermark_ms: int, timer_fired: bool) -> list[tuple]:
        waiting = _pending_frame(self.pending.get()) if self.pending.exists() else _pending_frame([])
        if not arrived.empty:
            # A ping not after the last applied one comes too late to be put in order: skip it.
            if track.last_ms is not None:
                arrived = arrived[arrived["event_ms"] > track.last_ms]
            waiting = pd.concat([waiting, arrived], ignore_index=True) if not waiting.empty else arrived
            if not arrived.empty:
                track.seen_ms = max(track.seen_ms or 0, int(arrived["event_ms"].max()))
        if timer_fired:
            track.timer_ms = None  # Spark removes a timer once it fired
        waiting = waiting.sort_values("event_ms", kind="stable")
        ready = waiting[waiting["event_ms"] <= watermark_ms]
        waiting = waiting[waiting["event_ms"] > watermark_ms]
        out = advance(self.rules, vehicle, track, ready)
        if track.seen_ms is None:
            self._forget(track)
            return out
        if waiting.empty and watermark_ms >= track.seen_ms + self.rules.timeout_ms:
            if track.opened:  # silent for the timeout: the event that ends it never came
                out.append(track.incident(vehicle, "timeout", track.seen_ms + self.rules.timeout_ms))
            self._forget(track)
            return out
        if self.rules.updates and track.opened and track.emitted_ms != track.run_last_ms:
            out.append(track.incident(vehicle, None, None))
            track.emitted_ms = track.run_last_ms
        self._save(track, waiting, watermark_ms)
        return out

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        vehicle = key[0]
        frames = [df for df in rows if not df.empty]
        if not frames:
            return
        pings = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        arrived = pd.DataFrame({
            "event_ms": pings["event_ms"].astype("int64"), "speed_kmh": pings["speed_kmh"].astype(float),
            "excess_kmh": (pings["speed_kmh"] - pings["speed_limit_kmh"]).astype(float),
            "lat": pings["lat"].astype(float), "lon": pings["lon"].astype(float), "zone_id": pings["zone_id"],
        })
        if self.batch:
            track = Track()
            out = advance(self.rules, vehicle, track, arrived.sort_values("event_ms", kind="stable"))
            if track.opened:
                out.append(track.incident(vehicle, "timeout", track.last_ms + self.rules.timeout_ms))
        else:
            out = self._step(vehicle, self._load(), arrived, timerValues.getCurrentWatermarkInMs(), False)
        if out:
            yield _frame(out)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        if not self.track_state.exists():
            return
        out = self._step(key[0], self._load(), _pending_frame([]), timerValues.getCurrentWatermarkInMs(), True)
        if out:
            yield _frame(out)

    def handleInitialState(self, key: Any, initialState: pd.DataFrame, timerValues: TimerValues) -> None:
        """An open incident carried over from a table: the vehicle resumes inside it."""
        row = initialState.sort_values("started_at").iloc[-1]
        started, ended = _millis(row["started_at"]), _millis(row["ended_at"])
        track = Track(last_ms=ended, last_lat=float(row["last_lat"]), last_lon=float(row["last_lon"]), seen_ms=ended,
                      run_start_ms=started, run_last_ms=ended, run_zone=row["zone_id"],
                      run_max=float(row["max_speed_kmh"]), run_excess=float(row["max_excess_kmh"]),
                      run_km=float(row["distance_km"]), run_pings=int(row["pings"]), opened=True, emitted_ms=ended)
        self._save(track, _pending_frame([]), timerValues.getCurrentWatermarkInMs())

    def close(self) -> None:
        pass


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
