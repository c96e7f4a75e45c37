"""The fleet job's seven outputs on Apache Flink through PyFlink (own virtual environment).

    .peers-venv/flink/bin/python bench/peers/flink_seven.py INPUT_DIR OUT_DIR [--parallelism 2]
        [--trip-gap 5min] [--max-trip 1h] [--incident-after 10s] [--incident-timeout 30s]

One job, written from Flink's documentation: the JSON lines are read as raw text (filesystem
connector, ``raw`` format, the file's modification time as ingest time) and parsed with
``JSON_VALUE``; a row is an event when its fields are present and in range and its time is at
most 1 s ahead of the ingest time (``bench/plain_fleet.py``'s rules), and only events carry an
event time: a refused row gets 1970, so it never moves the 5 s ``WATERMARK``. Then:

- dead-letters: the refused rows, with a reason of this file's own words;
- late: events at or behind ``CURRENT_WATERMARK`` (as Flink's docs route late rows), a row per
  late record; the others are deduplicated by ``ROW_NUMBER`` over ``event_id`` (first row by
  processing time, the insert-only form; its state kept a minute, ``table.exec.state.ttl``) and
  get their zone from a ``CASE`` over the zones table;
- windows, sliding, alerts: ``TUMBLE``, ``HOP`` and a filter, in SQL;
- incidents, trips: ``KeyedProcessFunction``s keyed by vehicle (DataStream API), whose pings
  wait in state until the watermark passes them and are then applied in event-time order by
  event-time timers, with ``bench/plain_fleet.py``'s rules.

Flink's defaults otherwise: the watermark assigner emits as soon as the watermark has moved
200 ms (and every 200 ms), the job runs with parallelism 2, and the Python functions run in
Flink's thread mode (in the JVM; ``--execution-mode process`` for Python worker processes). At
the end of the input the watermark jumps to the end of time: every window, trip and incident
still open is written too. Each output is a directory of JSON-lines part files under OUT_DIR;
the script prints the rows of each and the wall time.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import sysconfig
import time
from pathlib import Path

from pyflink.common import Configuration, Row, Types
from pyflink.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from pyflink.datastream.state import ListStateDescriptor, ValueStateDescriptor
from pyflink.table import EnvironmentSettings, StreamTableEnvironment

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import zone_case

OUTPUTS = ("windows", "sliding", "alerts", "dead-letters", "incidents", "trips", "late")
#: the event time a refused row gets: before every event, so it never moves the watermark
NO_TIME = "TIMESTAMP '1970-01-01 00:00:00'"
ISO = "'yyyy-MM-dd''T''HH:mm:ss.SSS''Z'''"

#: each field of the payload, parsed from its JSON text (a number that is text is no number)
FIELDS = {
    "event_id": "NULLIF(TRIM(JSON_VALUE(payload, '$.event_id')), '')",
    "vehicle_id": "NULLIF(TRIM(JSON_VALUE(payload, '$.vehicle_id')), '')",
    "event_time": f"TO_TIMESTAMP(JSON_VALUE(payload, '$.event_time'), {ISO})",
    "speed_kmh": "TRY_CAST(JSON_VALUE(payload, '$.speed_kmh') AS DOUBLE)",
    "lat": "TRY_CAST(JSON_VALUE(payload, '$.lat') AS DOUBLE)",
    "lon": "TRY_CAST(JSON_VALUE(payload, '$.lon') AS DOUBLE)",
}


def duration_ms(text: str) -> int:
    """'500ms', '10s', '5min', '1h' as milliseconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|min|h)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: write a duration such as 10s, 5min or 1h")
    return int(float(m.group(1)) * {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000}[m.group(2)])


def interval(ms: int) -> str:
    """A duration as a Flink SQL day-time interval literal, to the millisecond."""
    seconds, milli = divmod(ms, 1000)
    minutes, s = divmod(seconds, 60)
    hours, m = divmod(minutes, 60)
    return f"INTERVAL '{hours // 24} {hours % 24:02d}:{m:02d}:{s:02d}.{milli:03d}' DAY TO SECOND(3)"


def source_ddl(path: Path, watermark_ms: int, max_ahead_ms: int) -> str:
    """The raw lines, their fields, and ``ts``: the event time of a valid event, else 1970."""
    f = FIELDS
    ahead = f"{f['event_time']} > CAST(ingest_time AS TIMESTAMP(3)) + {interval(max_ahead_ms)}"
    valid = (f"{f['event_id']} IS NOT NULL AND {f['vehicle_id']} IS NOT NULL AND {f['event_time']} IS NOT NULL "
             f"AND {f['speed_kmh']} BETWEEN 0 AND 400 AND {f['lat']} BETWEEN -90 AND 90 "
             f"AND {f['lon']} BETWEEN -180 AND 180 AND {f['event_time']} >= TIMESTAMP '2000-01-01 00:00:00' "
             f"AND NOT ({ahead})")
    reason = (f"CASE WHEN {f['event_id']} IS NULL AND {f['vehicle_id']} IS NULL THEN 'unparseable JSON' "
              f"WHEN {f['event_id']} IS NULL OR {f['vehicle_id']} IS NULL OR {f['event_time']} IS NULL "
              "THEN 'missing field' "
              f"WHEN {ahead} THEN 'event time ahead of ingest time' ELSE 'field out of range or not a number' END")
    columns = ",\n".join(f"{name} AS {expr}" for name, expr in f.items())
    return f"""
        CREATE TABLE pings (
            payload STRING,
            ingest_time TIMESTAMP_LTZ(3) METADATA FROM 'file.modification-time' VIRTUAL,
            {columns},
            reason AS {reason},
            ts AS CASE WHEN {valid} THEN {f['event_time']} ELSE {NO_TIME} END,
            WATERMARK FOR ts AS ts - {interval(watermark_ms)}
        ) WITH ('connector' = 'filesystem', 'path' = '{path.resolve().as_uri()}', 'format' = 'raw')"""


SINKS = {
    "windows": "window_start TIMESTAMP(3), window_end TIMESTAMP(3), vehicle_id STRING, events BIGINT, "
               "avg_speed_kmh DOUBLE, max_speed_kmh DOUBLE, over_limit_events BIGINT",
    "sliding": "window_start TIMESTAMP(3), window_end TIMESTAMP(3), vehicle_id STRING, events BIGINT, avg_speed_kmh DOUBLE",
    "alerts": "event_id STRING, vehicle_id STRING, event_time TIMESTAMP(3), speed_kmh DOUBLE, speed_limit_kmh DOUBLE, "
              "excess_kmh DOUBLE, zone_id STRING, zone_name STRING, lat DOUBLE, lon DOUBLE",
    "dead-letters": "payload STRING, reason STRING, ingest_time TIMESTAMP_LTZ(3)",
    "incidents": "vehicle_id STRING, started_at TIMESTAMP(3), ended_at TIMESTAMP(3), duration_s DOUBLE, zone_id STRING, "
                 "max_speed_kmh DOUBLE, max_excess_kmh DOUBLE, distance_km DOUBLE, pings BIGINT, status STRING, "
                 "closed_by STRING, closed_at TIMESTAMP(3), last_lat DOUBLE, last_lon DOUBLE",
    "trips": "vehicle_id STRING, trip_start TIMESTAMP(3), trip_end TIMESTAMP(3), duration_s DOUBLE, pings BIGINT, "
             "distance_km DOUBLE, avg_speed_kmh DOUBLE, max_speed_kmh DOUBLE",
    "late": "event_id STRING, vehicle_id STRING, event_time TIMESTAMP(3), speed_kmh DOUBLE, lat DOUBLE, lon DOUBLE, "
            "window_start TIMESTAMP(3), window_end TIMESTAMP(3), missed_watermark TIMESTAMP(3), copies BIGINT",
}


def table(name: str) -> str:
    """An output's sink table (its directory keeps the output's name)."""
    return name.replace("-", "_")


def sink_ddl(name: str, out: Path) -> str:
    return f"""
        CREATE TABLE {table(name)} ({SINKS[name]}) WITH (
            'connector' = 'filesystem', 'path' = '{(out / name).resolve().as_uri()}', 'format' = 'json',
            'json.timestamp-format.standard' = 'ISO-8601')"""


def queries(window_ms: int, sliding_ms: int, slide_ms: int) -> dict[str, str]:
    """The SQL outputs, over the views ``pings`` (every row), ``on_time`` and ``events`` (deduplicated, with zone)."""
    # a late event's tumbling window, from its second within the minute (the window divides a minute)
    late_window = f"TIMESTAMPADD(SECOND, -MOD(EXTRACT(SECOND FROM ts), {window_ms // 1000}), FLOOR(ts TO SECOND))"
    return {
        "dead-letters": f"SELECT payload, reason, ingest_time FROM pings WHERE ts = {NO_TIME}",
        "late": f"""
            SELECT event_id, vehicle_id, CAST(ts AS TIMESTAMP(3)), speed_kmh, lat, lon,
                   CAST({late_window} AS TIMESTAMP(3)),
                   CAST(TIMESTAMPADD(SECOND, {window_ms // 1000}, {late_window}) AS TIMESTAMP(3)),
                   CAST(CURRENT_WATERMARK(ts) AS TIMESTAMP(3)), CAST(1 AS BIGINT)
            FROM pings WHERE ts <> {NO_TIME} AND ts <= CURRENT_WATERMARK(ts)""",
        "windows": f"""
            SELECT window_start, window_end, vehicle_id, COUNT(*), AVG(speed_kmh), MAX(speed_kmh),
                   CAST(SUM(CASE WHEN speed_kmh > speed_limit_kmh THEN 1 ELSE 0 END) AS BIGINT)
            FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), {interval(window_ms)}))
            GROUP BY window_start, window_end, vehicle_id""",
        "sliding": f"""
            SELECT window_start, window_end, vehicle_id, COUNT(*), AVG(speed_kmh)
            FROM TABLE(HOP(TABLE events, DESCRIPTOR(ts), {interval(slide_ms)}, {interval(sliding_ms)}))
            GROUP BY window_start, window_end, vehicle_id""",
        "alerts": """
            SELECT event_id, vehicle_id, CAST(ts AS TIMESTAMP(3)), speed_kmh, speed_limit_kmh,
                   ROUND(speed_kmh - speed_limit_kmh, 1), zone_id, zone_name, lat, lon
            FROM events WHERE speed_kmh > speed_limit_kmh""",
    }


# --- the keyed process functions -------------------------------------------------------------------


def haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    a = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
    return 2 * 6371.0088 * math.asin(min(1.0, math.sqrt(a)))


class _Buffered(KeyedProcessFunction):
    """Pings of one vehicle wait in state until the watermark passes them (an event-time timer at
    each ping's time), then ``_apply`` takes them in event-time order."""

    def open(self, runtime_context) -> None:
        self.waiting = runtime_context.get_list_state(ListStateDescriptor("waiting", Types.PICKLED_BYTE_ARRAY()))
        self.track = runtime_context.get_state(ValueStateDescriptor("track", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value, ctx):
        t = ctx.timestamp()
        self.waiting.add((t, *self._ping(value)))
        ctx.timer_service().register_event_time_timer(t)

    def on_timer(self, timestamp: int, ctx):
        watermark = ctx.timer_service().current_watermark()
        waiting = sorted(self.waiting.get())
        due = [p for p in waiting if p[0] <= watermark]
        if not due and self.track.value() is None:
            return
        rest = [p for p in waiting if p[0] > watermark]
        if rest:
            self.waiting.update(rest)
        else:
            self.waiting.clear()
        yield from self._apply(ctx.get_current_key(), due, watermark, not rest, ctx)


class Incidents(_Buffered):
    """Above the zone's limit for ``after_ms`` opens an incident; a ping at or under the limit closes
    it (``speed``), and so does silence longer than ``timeout_ms`` (``timeout``)."""

    def __init__(self, after_ms: int, timeout_ms: int):
        self.after_ms, self.timeout_ms = after_ms, timeout_ms

    @staticmethod
    def _ping(r) -> tuple:
        return r.speed_kmh, r.speed_kmh - r.speed_limit_kmh, r.lat, r.lon, r.zone_id

    def _apply(self, vehicle: str, due: list[tuple], watermark: int, drained: bool, ctx):
        k = self.track.value() or {"last": None, "start": None}
        for t, speed, excess, lat, lon, zone in due:
            step = 0.0
            if k["last"] is not None:
                if t - k["last"] > self.timeout_ms:  # a silence ends any run
                    yield from self._closed(vehicle, k, "timeout", k["last"] + self.timeout_ms)
                    k["start"] = None
                else:
                    step = haversine_km(k["lat"], k["lon"], lat, lon)
            if excess > 0:
                if k["start"] is None:
                    k.update(start=t, zone=zone, km=0.0, pings=0, max_speed=speed, max_excess=excess, opened=False)
                else:
                    k["km"] += step
                k["pings"] += 1
                k["max_speed"], k["max_excess"] = max(k["max_speed"], speed), max(k["max_excess"], excess)
                k["end"] = t
                k["opened"] = t - k["start"] >= self.after_ms
            elif k["start"] is not None:
                yield from self._closed(vehicle, k, "speed", t)
                k["start"] = None
            k.update(last=t, lat=lat, lon=lon)
        if drained and k["last"] is not None and watermark >= k["last"] + self.timeout_ms:
            yield from self._closed(vehicle, k, "timeout", k["last"] + self.timeout_ms)
            self.track.clear()
            return
        self.track.update(k)
        ctx.timer_service().register_event_time_timer(k["last"] + self.timeout_ms)

    @staticmethod
    def _closed(vehicle: str, k: dict, by: str, at: int):
        if k["start"] is not None and k["opened"]:
            yield Row(vehicle, k["start"], k["end"], (k["end"] - k["start"]) / 1000.0, k["zone"], k["max_speed"],
                      k["max_excess"], k["km"], k["pings"], "closed", by, at, k["lat"], k["lon"])


class Trips(_Buffered):
    """A trip goes on while each ping comes at most ``gap_ms`` after the one before, within the same
    multiple of ``max_trip_ms`` since the epoch; written once the watermark reaches its last ping
    plus the gap."""

    def __init__(self, gap_ms: int, max_trip_ms: int):
        self.gap_ms, self.max_trip_ms = gap_ms, max_trip_ms

    @staticmethod
    def _ping(r) -> tuple:
        return r.lat, r.lon, r.speed_kmh

    def _apply(self, vehicle: str, due: list[tuple], watermark: int, drained: bool, ctx):
        trips = self.track.value() or []  # [start, last, lat, lon, pings, speed sum, speed max, km]
        for t, lat, lon, speed in due:
            last = trips[-1] if trips else None
            if last is None or t - last[1] > self.gap_ms or t // self.max_trip_ms != last[1] // self.max_trip_ms:
                last = [t, t, lat, lon, 0, 0.0, speed, 0.0]
                trips.append(last)
            else:
                last[7] += haversine_km(last[2], last[3], lat, lon)
            last[1:4] = [t, lat, lon]
            last[4] += 1
            last[5] += speed
            last[6] = max(last[6], speed)
        for s in (s for s in trips if s[1] + self.gap_ms <= watermark):
            yield Row(vehicle, s[0], s[1], (s[1] - s[0]) / 1000.0, s[4], s[7], s[5] / s[4], s[6])
        trips = [s for s in trips if s[1] + self.gap_ms > watermark]
        self.track.update(trips or None)
        for s in trips:
            ctx.timer_service().register_event_time_timer(s[1] + self.gap_ms)


INCIDENT_ROW = Types.ROW_NAMED(
    ["vehicle_id", "started_ms", "ended_ms", "duration_s", "zone_id", "max_speed_kmh", "max_excess_kmh", "distance_km",
     "pings", "status", "closed_by", "closed_ms", "last_lat", "last_lon"],
    [Types.STRING(), Types.LONG(), Types.LONG(), Types.DOUBLE(), Types.STRING(), Types.DOUBLE(), Types.DOUBLE(),
     Types.DOUBLE(), Types.LONG(), Types.STRING(), Types.STRING(), Types.LONG(), Types.DOUBLE(), Types.DOUBLE()])
TRIP_ROW = Types.ROW_NAMED(
    ["vehicle_id", "start_ms", "end_ms", "duration_s", "pings", "distance_km", "avg_speed_kmh", "max_speed_kmh"],
    [Types.STRING(), Types.LONG(), Types.LONG(), Types.DOUBLE(), Types.LONG(), Types.DOUBLE(), Types.DOUBLE(),
     Types.DOUBLE()])


def _ts(ms_column: str) -> str:
    return f"CAST(TO_TIMESTAMP_LTZ({ms_column}, 3) AS TIMESTAMP(3))"


# --- the job ----------------------------------------------------------------------------------------


def build(env: StreamExecutionEnvironment, args: argparse.Namespace):
    """The job's statement set, every output inserted into its sink."""
    t_env = StreamTableEnvironment.create(env, EnvironmentSettings.in_streaming_mode())
    config = t_env.get_config()
    config.set("table.local-time-zone", "UTC")
    # the dedup's state: an event id is kept a minute (re-sent copies come within a few events)
    config.set("table.exec.state.ttl", "1 min")
    t_env.execute_sql(source_ddl(args.input, args.watermark, args.max_ahead))
    for name in OUTPUTS:
        t_env.execute_sql(sink_ddl(name, args.out))
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW on_time AS
        SELECT event_id, vehicle_id, ts, speed_kmh, lat, lon, PROCTIME() AS arrival FROM pings
        WHERE ts <> {NO_TIME} AND (CURRENT_WATERMARK(ts) IS NULL OR ts > CURRENT_WATERMARK(ts))""")
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW events AS
        SELECT event_id, vehicle_id, ts, speed_kmh, lat, lon, {zone_case('zone_id')} AS zone_id,
               {zone_case('name')} AS zone_name, {zone_case('speed_limit_kmh')} AS speed_limit_kmh
        FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY event_id ORDER BY arrival) AS copy FROM on_time)
        WHERE copy = 1""")
    statements = t_env.create_statement_set()
    for name, sql in queries(args.window, args.sliding, args.slide).items():
        statements.add_insert(table(name), t_env.sql_query(sql))
    pings = t_env.to_data_stream(t_env.from_path("events")).key_by(lambda r: r.vehicle_id, key_type=Types.STRING())
    incidents = pings.process(Incidents(args.incident_after, args.incident_timeout), output_type=INCIDENT_ROW)
    trips = pings.process(Trips(args.trip_gap, args.max_trip), output_type=TRIP_ROW)
    t_env.create_temporary_view("incident_rows", t_env.from_data_stream(incidents))
    t_env.create_temporary_view("trip_rows", t_env.from_data_stream(trips))
    statements.add_insert("incidents", t_env.sql_query(f"""
        SELECT vehicle_id, {_ts('started_ms')}, {_ts('ended_ms')}, duration_s, zone_id, max_speed_kmh, max_excess_kmh,
               distance_km, pings, status, closed_by, {_ts('closed_ms')}, last_lat, last_lon FROM incident_rows"""))
    statements.add_insert("trips", t_env.sql_query(f"""
        SELECT vehicle_id, {_ts('start_ms')}, {_ts('end_ms')}, duration_s, pings, distance_km, avg_speed_kmh,
               max_speed_kmh FROM trip_rows"""))
    return statements


def count_rows(directory: Path) -> int:
    """Lines in an output's committed part files (Flink hides files in progress behind a dot)."""
    files = [p for p in directory.rglob("*") if p.is_file() and not p.name.startswith(".")] if directory.is_dir() else []
    return sum(sum(1 for _ in open(p, "rb")) for p in files)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("input", type=Path, help="directory holding the events as one JSON-lines file")
    p.add_argument("out", type=Path, help="output directory: one directory of JSON-lines part files per output")
    p.add_argument("--parallelism", type=int, default=2)
    for flag, default in (("watermark", "5s"), ("max-ahead", "1s"), ("window", "10s"), ("sliding", "1min"),
                          ("slide", "10s"), ("trip-gap", "5min"), ("max-trip", "1h"), ("incident-after", "10s"),
                          ("incident-timeout", "30s")):
        p.add_argument(f"--{flag}", type=duration_ms, default=duration_ms(default), help=f"default {default}")
    p.add_argument("--execution-mode", choices=("thread", "process"), default="thread",
                   help="where the Python functions run: in the JVM (thread, default) or in Python worker processes")
    args = p.parse_args()
    if 60_000 % args.window or args.window % 1000:
        p.error("--window must be whole seconds that divide a minute (the late events' windows are counted so)")
    started = time.perf_counter()
    # thread mode's interpreter, embedded in the JVM (started with the first Java object), sees only
    # the base Python's packages: add this venv's
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [sysconfig.get_paths()["purelib"], os.environ.get("PYTHONPATH")]))
    config = Configuration()
    config.set_string("python.execution-mode", args.execution_mode)
    # process mode: keep every vehicle's state in the worker's cache (Flink's default caches 1,000)
    config.set_string("python.state.cache-size", "100000")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(args.parallelism)
    build(env, args).attach_as_datastream()
    env.execute("fleet-seven")
    wall = time.perf_counter() - started
    for name in OUTPUTS:
        print(f"{name:<13} {count_rows(args.out / name):>9,} rows")
    print(f"wall {wall:.1f} s")


if __name__ == "__main__":
    main()
