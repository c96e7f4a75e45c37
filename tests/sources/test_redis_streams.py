"""redis:// — Redis Streams read through Spark's Python Data Source API, on a real redis-server.

Every stream query below ends by itself (trigger availableNow), so nothing waits on the clock.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest
from pyspark.sql import functions as F

from speedlayer.core.errors import SourceError
from speedlayer.core.schemas import RAW_SCHEMA
from speedlayer.decode.validate import decode
from speedlayer.pipelines.fleet.schemas import VEHICLE_EVENT
from speedlayer.sources import open_source
from speedlayer.sources.redis_streams import RedisStreamsSource

T0_MS = 1_795_341_600_000  # 2026-11-22T10:00:00Z


def event(n: int, t_ms: int | None = None) -> str:
    """The wire-format event n, at T0 + n ms unless told."""
    t_ms = T0_MS + n if t_ms is None else t_ms
    iso = datetime.fromtimestamp(t_ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{t_ms % 1000:03d}Z"
    return json.dumps({"event_id": f"e-{n:06d}", "vehicle_id": f"V{n % 7:04d}", "event_time": iso,
                       "speed_kmh": 40.0 + n % 50, "lat": 52.5, "lon": 13.4})


def fill(url: str, stream: str, first: int, count: int, shards: int | None = None) -> list[str]:
    """Write events first … first+count-1 round-robin over the shards (as ``speedlayer produce`` does).

    Entry ids are T0 + n ms, so ingest times are known.
    """
    import redis

    client = redis.Redis.from_url(url)
    pipe = client.pipeline(transaction=False)
    values = []
    for n in range(first, first + count):
        key = f"{stream}:{n % shards}" if shards else stream
        values.append(event(n))
        pipe.xadd(key, {"value": values[-1]}, id=f"{T0_MS + n}-0")
    pipe.execute()
    client.close()
    return values


def drain(spark, source, checkpoint, max_events: int | None = None):
    """Run the source to its current end (availableNow): its rows, and the progress of batches with rows."""
    rows = []

    def collect(df, batch_id):
        rows.extend(df.collect())

    query = (source.read_stream(spark, max_events).writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    return rows, [p for p in query.recentProgress if p["numInputRows"] > 0]


@pytest.mark.parametrize("shards", [None, 3])
def test_stream_reads_exactly_the_entries_written(spark, redis_url, tmp_path, shards):
    url, stream = redis_url
    written = fill(url, stream, 0, 500, shards)
    query_opts = f"&shards={shards}" if shards else ""
    source = open_source(f"{url}?stream={stream}{query_opts}&fetch_size=64")
    source.check()
    rows, progress = drain(spark, source, tmp_path / "ck")

    assert sorted(r.value for r in rows) == sorted(written)
    assert len({r.offset for r in rows}) == 500
    keys = {f"{stream}:{i}" for i in range(shards)} if shards else {stream}
    assert {r.key for r in rows} == keys
    assert all(r.offset.startswith(f"{r.key}/") and r.ingest_time is not None for r in rows)
    assert source.read_stream(spark).schema == RAW_SCHEMA
    assert source.events_read(progress[-1]["sources"][0]) == 500
    # the static read of the same entries
    assert sorted(r.value for r in source.read_batch(spark).collect()) == sorted(written)


def test_max_records_per_trigger_bounds_every_batch(spark, redis_url, tmp_path):
    url, stream = redis_url
    fill(url, stream, 0, 1000, shards=4)
    source = open_source(f"{url}?stream={stream}&shards=4&maxRecordsPerTrigger=300")
    rows, progress = drain(spark, source, tmp_path / "ck")
    assert [p["numInputRows"] for p in progress] == [300, 300, 300, 100]
    assert len({r.offset for r in rows}) == len(rows) == 1000


def test_uneven_shards_share_the_budget(spark, redis_url, tmp_path):
    url, stream = redis_url
    import redis

    client = redis.Redis.from_url(url)
    for n in range(90):
        client.xadd(f"{stream}:0", {"value": event(n)})
    for n in range(90, 100):
        client.xadd(f"{stream}:1", {"value": event(n)})
    client.close()
    source = open_source(f"{url}?stream={stream}&shards=2&maxRecordsPerTrigger=40")
    _, progress = drain(spark, source, tmp_path / "ck")
    assert [p["numInputRows"] for p in progress] == [40, 40, 20]


def test_deleted_entries_are_not_counted(spark, redis_url, tmp_path):
    url, stream = redis_url
    import redis

    written = fill(url, stream, 0, 500)
    client = redis.Redis.from_url(url)
    client.xdel(stream, *[f"{T0_MS + n}-0" for n in range(0, 500, 10)])  # 50 gone, all over the stream
    client.close()
    source = open_source(f"{url}?stream={stream}&maxRecordsPerTrigger=200")
    rows, progress = drain(spark, source, tmp_path / "ck")
    assert [p["numInputRows"] for p in progress] == [200, 200, 50]
    assert sorted(r.value for r in rows) == sorted(v for n, v in enumerate(written) if n % 10)
    assert source.events_read(progress[-1]["sources"][0]) == 450


def test_restart_reads_the_rest_and_a_replayed_batch_reads_the_same_entries(spark, redis_url, tmp_path):
    url, stream = redis_url
    written = fill(url, stream, 0, 600, shards=2)
    source = open_source(f"{url}?stream={stream}&shards=2&maxRecordsPerTrigger=200")
    checkpoint = tmp_path / "ck"
    batches: dict[int, list[str]] = {}

    def run() -> None:
        def collect(df, batch_id):
            batches[batch_id] = sorted(r.value for r in df.collect())

        query = (source.read_stream(spark).writeStream.foreachBatch(collect)
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None

    run()
    assert sorted(batches) == [0, 1, 2] and all(len(b) == 200 for b in batches.values())
    first_run = dict(batches)
    # Batch 2 was planned but, as if the process died before committing it, its commit is lost.
    for lost in ("2", ".2.crc"):
        (checkpoint / "commits" / lost).unlink(missing_ok=True)
    written += fill(url, stream, 600, 400, shards=2)
    run()
    assert batches[2] == first_run[2]  # the replay reads the same fixed range, not the newer entries
    assert sorted(batches) == [0, 1, 2, 3, 4]
    everything = [v for b in sorted(batches) for v in batches[b]]
    assert sorted(everything) == sorted(written)  # no gap, no duplicate


def test_starting_offsets_latest_skips_what_was_there(spark, redis_url, tmp_path):
    url, stream = redis_url
    fill(url, stream, 0, 100)
    source = open_source(f"{url}?stream={stream}&startingOffsets=latest")
    assert drain(spark, source, tmp_path / "ck") == ([], [])
    new = fill(url, stream, 100, 50)
    rows, _ = drain(spark, source, tmp_path / "ck")
    assert sorted(r.value for r in rows) == sorted(new)


def test_latest_is_pinned_once_per_run_so_every_query_starts_together(spark, redis_url, tmp_path):
    url, stream = redis_url
    fill(url, stream, 0, 100, shards=2)
    run_state: dict = {}
    open_source(f"{url}?stream={stream}&shards=2&startingOffsets=latest").pin(run_state)
    after_pin = fill(url, stream, 100, 30, shards=2)
    first = open_source(f"{url}?stream={stream}&shards=2&startingOffsets=latest")
    first.pin(run_state)  # a restart reads the pinned ids back
    rows, _ = drain(spark, first, tmp_path / "ck1")
    assert sorted(r.value for r in rows) == sorted(after_pin)
    later = fill(url, stream, 130, 20, shards=2)
    second = open_source(f"{url}?stream={stream}&shards=2&startingOffsets=latest")
    second.pin(run_state)  # another query of the same run, started later
    rows, _ = drain(spark, second, tmp_path / "ck2")
    assert sorted(r.value for r in rows) == sorted(after_pin + later)
    assert sorted(r.value for r in second.read_batch(spark).collect()) == sorted(after_pin + later)
    assert run_state["redis_latest_ids"] == {f"{stream}:0": [f"{T0_MS + 98}-0", 50], f"{stream}:1": [f"{T0_MS + 99}-0", 50]}


def test_max_events_reads_exactly_the_first_events(spark, redis_url, tmp_path):
    url, stream = redis_url
    written = fill(url, stream, 0, 400, shards=3)
    source = open_source(f"{url}?stream={stream}&shards=3&maxRecordsPerTrigger=100")
    rows, progress = drain(spark, source, tmp_path / "ck", max_events=250)
    assert sorted(r.value for r in rows) == sorted(written[:250])
    assert source.events_read(progress[-1]["sources"][0]) == 250
    assert sorted(r.value for r in source.read_batch(spark, 250).collect()) == sorted(written[:250])


def test_unreachable_server_is_one_line_without_the_password():
    from tests.servers import free_port

    port = free_port()
    source = open_source(f"redis://app:s3cret@127.0.0.1:{port}/0?stream=vehicles")
    with pytest.raises(SourceError) as info:
        source.check()
    message = str(info.value)
    assert message.startswith(f"cannot reach Redis at 127.0.0.1:{port}: ")
    assert message.endswith("start redis-server or fix the URI")
    assert "\n" not in message and "s3cret" not in message
    assert "s3cret" not in source.describe()


def test_missing_stream_names_the_keys_and_the_producer(redis_url):
    url, stream = redis_url
    with pytest.raises(SourceError) as info:
        open_source(f"{url}?stream={stream}&shards=2").check()
    message = str(info.value)
    assert f"{stream}:0, {stream}:1" in message and "speedlayer produce --to" in message
    assert "\n" not in message


def test_a_key_of_another_type_is_refused(redis_url):
    url, stream = redis_url
    import redis

    redis.Redis.from_url(url).set(stream, "x")
    with pytest.raises(SourceError, match="holds a string, not a stream"):
        open_source(f"{url}?stream={stream}").check()


def test_bad_options_are_config_errors():
    from speedlayer.core.errors import ConfigError

    with pytest.raises(ConfigError, match="option 'starting_offsets'"):
        open_source("redis://localhost/0?startingOffsets=middle")
    with pytest.raises(ConfigError, match="given twice"):
        open_source("redis://localhost/0?max_records_per_trigger=5&maxRecordsPerTrigger=5")
    assert open_source("redis://localhost/0?max_records_per_trigger=5").options.max_records_per_trigger == 5
    with pytest.raises(ConfigError, match="has no option 'topic'"):
        open_source("redis://localhost/0?topic=x")
    with pytest.raises(ConfigError, match="database number"):
        open_source("redis://localhost/zero?stream=x")


def test_password_reaches_redis_and_no_message_or_plan(spark, tmp_path):
    import redis

    from tests.servers import RedisServer

    with RedisServer(appendonly=False) as server:
        redis.Redis(port=server.port).config_set("requirepass", "s3cret")
        url = f"redis://:s3cret@127.0.0.1:{server.port}/0"
        fill(url, "v", 0, 20)
        source = open_source(f"{url}?stream=v")
        source.check()
        df = source.read_stream(spark)
        query = (df.writeStream.format("memory").queryName("redis_auth").trigger(availableNow=True)
                 .option("checkpointLocation", str(tmp_path / "ck")).start())
        query.awaitTermination(300)
        assert spark.table("redis_auth").count() == 20
        shown = json.dumps(query.recentProgress, default=str) + source.describe() + df._jdf.queryExecution().toString()
        assert "s3cret" not in shown
        with pytest.raises(SourceError) as info:
            open_source(f"redis://:n0tTh1s@127.0.0.1:{server.port}/0?stream=v").check()
        assert "refused the credentials" in str(info.value) and "n0tTh1s" not in str(info.value)


def test_decode_on_its_raw_output_sends_odd_entries_to_dead_letters(spark, redis_url):
    url, stream = redis_url
    import redis

    client = redis.Redis.from_url(url)
    client.xadd(stream, {"value": event(1, T0_MS + 1000)}, id=f"{T0_MS + 1000}-0")
    client.xadd(stream, {"value": event(2, T0_MS + 2000), "source": "app-7"}, id=f"{T0_MS + 2000}-0")  # extra field
    client.xadd(stream, {"payload": "no value field"}, id=f"{T0_MS + 3000}-0")
    client.xadd(stream, {"value": b"\xff\xfe not utf-8"}, id=f"{T0_MS + 4000}-0")
    client.xadd(stream, {"value": "{not json"}, id=f"{T0_MS + 5000}-0")
    client.close()
    decoded = decode(open_source(f"{url}?stream={stream}").read_batch(spark), VEHICLE_EVENT)
    events = decoded.events.orderBy("event_id").collect()
    assert [e.event_id for e in events] == ["e-000001", "e-000002"]
    assert events[1].ingest_time.isoformat().startswith("2026-11-22T10:00:02")
    dead = {r.offset: r.reason for r in decoded.dead_letters.collect()}
    assert dead == {
        f"{stream}/{T0_MS + 3000}-0": "empty payload",
        f"{stream}/{T0_MS + 4000}-0": "malformed JSON: not a JSON object",
        f"{stream}/{T0_MS + 5000}-0": "malformed JSON: not a JSON object",
    }


def test_stream_equals_batch_through_decode(spark, redis_url, tmp_path):
    url, stream = redis_url
    fill(url, stream, 0, 300, shards=2)
    source: RedisStreamsSource = open_source(f"{url}?stream={stream}&shards=2")
    rows, _ = drain(spark, source, tmp_path / "ck")
    streamed = decode(spark.createDataFrame(rows, RAW_SCHEMA), VEHICLE_EVENT).events
    batch = decode(source.read_batch(spark), VEHICLE_EVENT).events
    assert streamed.count() == 300
    assert streamed.exceptAll(batch).count() == 0 and batch.exceptAll(streamed).count() == 0
    assert batch.agg(F.countDistinct("event_id")).first()[0] == 300


def test_bounded_fleet_run_on_redis_equals_the_batch_recomputation(spark, redis_url, tmp_path):
    from pyspark.testing import assertDataFrameEqual

    from speedlayer.producers.produce import ProduceSettings, plan_produce, produce
    from speedlayer.runtime.plan import plan_run
    from speedlayer.runtime.run import Run
    from speedlayer.runtime.settings import RunSettings
    from tests.helpers import batch_output, closed_windows

    url, stream = redis_url
    uri = f"{url}?stream={stream}&shards=2"
    # Redis stamps entries with its clock, and decode refuses events over --max-ahead (1 s) ahead of it:
    # produced unpaced, the 35 s of event time must lie in the past
    start = str((int(time.time()) - 60) * 1000)
    produce(spark, plan_produce(ProduceSettings(to=uri, generator="generator://?seed=11&rate=200&vehicles=50&late=0",
                                                rate=0, max_events=7000, start=start)))
    s = RunSettings(job="fleet", source=f"{uri}&maxRecordsPerTrigger=2500", max_events=6000,
                    state_dir=str(tmp_path / "state"), sinks={"windows": "memory:redis_fleet_windows"})
    summary = Run(spark, plan_run(s)).start_and_wait()
    assert summary.stopped_by == "--max-events 6000"
    assert summary.queries[0].input_rows == 6000
    expected = closed_windows(batch_output(spark, s, "windows"), summary.queries[0].watermark)
    assert expected.count() >= 100  # 50 vehicles, 30 s of events: at least two closed 10 s windows each
    assertDataFrameEqual(spark.table("redis_fleet_windows"), expected, rtol=1e-9)


# --- the data path on its own: read_range (executors) and the producer's writes, without Spark ---------

def read_values(url: str, key: str, start: str = "0-0", end: str = "+", fetch_size: int = 7,
                password: str | None = None) -> tuple[list[str], list[str | None]]:
    """Offsets and values of ``(start, end]`` of one key, as the executors read them."""
    from urllib.parse import urlsplit

    from speedlayer.sources.redis_datasource import KeyRange, read_range

    parts = urlsplit(url)
    spec = {"host": parts.hostname, "port": parts.port, "db": int(parts.path.strip("/") or 0),
            "username": parts.username, "fetch_size": fetch_size}
    batches = list(read_range(spec, password, KeyRange(key, start, end)))
    assert all(b.num_rows <= fetch_size for b in batches)
    return ([o for b in batches for o in b.column("offset").to_pylist()],
            [v for b in batches for v in b.column("value").to_pylist()])


def producer(uri: str):
    from speedlayer.core.uris import parse_uri
    from speedlayer.producers.redis_streams import RedisStreamsDestination

    destination = RedisStreamsDestination(parse_uri(uri))
    destination.open()
    return destination


def write(destination, first: int, values: list[bytes]) -> None:
    from speedlayer.producers.base import EventSlice

    destination.write(EventSlice(first, values, [b""] * len(values)))


def test_any_bytes_round_trip_through_the_producer_and_the_reader(redis_url):
    url, prefix = redis_url
    values = [f'{{"n": {i}, "text": "line\\r\\nbreak *2\\r\\n$5"}}'.encode() for i in range(2500)] + [b"", "ünï".encode()]
    destination = producer(f"{url}?stream={prefix}&shards=3")
    try:
        write(destination, 0, values[:1000])
        write(destination, 1000, values[1000:])  # continues the round robin where the first slice ended
    finally:
        destination.close()
    for shard in range(3):
        offsets, got = read_values(url, f"{prefix}:{shard}")
        assert got == [v.decode() for v in values[shard::3]] and len(set(offsets)) == len(got)
    ids = [o.split("/", 1)[1] for o in read_values(url, f"{prefix}:0")[0]]
    _, middle = read_values(url, f"{prefix}:0", start=ids[9], end=ids[19])  # (start, end]
    assert middle == [v.decode() for v in values[0::3][10:20]]
    assert read_values(url, f"{prefix}:missing") == ([], [])


def test_entries_with_other_fields_or_no_value(redis_url):
    import redis

    url, prefix = redis_url
    client = redis.Redis.from_url(url)
    client.xadd(prefix, {"value": "a"})
    client.xadd(prefix, {"source": "x", "value": "b", "more": "y"})
    client.xadd(prefix, {"other": "c"})
    client.xadd(prefix, {"value": "d"})
    client.close()
    assert read_values(url, prefix, fetch_size=3)[1] == ["a", "b", None, "d"]


def test_error_replies_are_one_line_errors(redis_url):
    import redis

    from speedlayer.core.errors import SinkError

    url, prefix = redis_url
    client = redis.Redis.from_url(url)
    client.set(f"{prefix}:1", "not a stream")
    with pytest.raises(SourceError, match="^WRONGTYPE Operation against a key holding the wrong kind of value$"):
        read_values(url, f"{prefix}:1")
    destination = producer(f"{url}?stream={prefix}&shards=3")
    try:
        with pytest.raises(SinkError) as info:
            write(destination, 0, [b"1", b"2", b"3", b"4"])
        assert str(info.value) == (f"Redis at {url.split('//')[1].split('/')[0]} refused an entry: "
                                   "WRONGTYPE Operation against a key holding the wrong kind of value")
        write(destination, 5, [b"6"])  # event 5 goes to shard 2: the connection is still usable
    finally:
        destination.close()
    assert [client.xlen(f"{prefix}:0"), client.xlen(f"{prefix}:2")] == [2, 2]  # the rest was still added
    client.close()


class ClosingServer:
    """A TCP server that reads a little of every connection and closes it: Redis dying mid-request."""

    def __enter__(self) -> ClosingServer:
        import socket
        import threading

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]

        def serve() -> None:
            while True:
                try:
                    conn, _ = self.sock.accept()
                except OSError:
                    return
                conn.recv(1 << 16)
                conn.close()

        threading.Thread(target=serve, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()


def test_unreachable_or_closing_servers_are_one_line_errors_without_the_password():
    from speedlayer.core.errors import SinkError
    from tests.servers import free_port

    port = free_port()
    refused = f"cannot reach Redis at 127.0.0.1:{port}: Connection refused; start redis-server or fix the URI"
    with pytest.raises(SourceError) as info:
        read_values(f"redis://127.0.0.1:{port}/0", "v", password="s3cret")
    assert str(info.value) == refused
    with pytest.raises(SinkError) as info:
        producer(f"redis://app:s3cret@127.0.0.1:{port}/0?stream=v")
    assert str(info.value) == refused
    with ClosingServer() as server:
        url = f"redis://127.0.0.1:{server.port}/0"
        for open_it, error in [(lambda: read_values(url, "v", password="s3cret"), SourceError),
                               (lambda: producer(f"redis://:s3cret@127.0.0.1:{server.port}/0?stream=v"), SinkError)]:
            with pytest.raises(error) as info:
                open_it()
            assert str(info.value) == f"Redis at 127.0.0.1:{server.port} closed the connection"


def test_data_path_auth_database_and_a_user_without_scripting():
    import redis

    from speedlayer.core.errors import SinkError
    from tests.servers import RedisServer

    with RedisServer(appendonly=False) as server:
        redis.Redis(port=server.port).config_set("requirepass", "pw1")
        admin = redis.Redis(port=server.port, password="pw1")
        url = f"redis://:pw1@127.0.0.1:{server.port}/3"
        destination = producer(f"{url}?stream=k")
        write(destination, 0, [b"v"])
        destination.close()
        assert redis.Redis(port=server.port, db=3, password="pw1").xlen("k") == 1
        assert read_values(url, "k", password="pw1")[1] == ["v"]
        for open_it, error in [(lambda: read_values(url, "k", password="n0tTh1s"), SourceError),
                               (lambda: producer(f"redis://:n0tTh1s@127.0.0.1:{server.port}/3?stream=k"), SinkError)]:
            with pytest.raises(error) as info:
                open_it()
            assert "refused the credentials" in str(info.value) and "n0tTh1s" not in str(info.value)
        # an ACL user who may not run scripts: the producer falls back to plain XADD
        admin.execute_command("ACL", "SETUSER", "app", "on", ">apw", "~*", "+@all", "-@scripting")
        destination = producer(f"redis://app:apw@127.0.0.1:{server.port}/4?stream=w&shards=2")
        assert destination._scripts is False
        write(destination, 0, [b"a", b"b", b"c"])
        destination.close()
        shards = [read_values(f"redis://app@127.0.0.1:{server.port}/4", f"w:{i}", password="apw")[1] for i in (0, 1)]
        assert shards == [["a", "c"], ["b"]]


def test_lag_counts_entries_added_beyond_the_end_offset(redis_url):
    import redis

    url, stream = redis_url
    client = redis.Redis.from_url(url, decode_responses=True)
    for key, count in ((f"{stream}:0", 7), (f"{stream}:1", 4)):
        for i in range(count):
            client.xadd(key, {"value": str(i)})
    source = open_source(f"{url}?stream={stream}&shards=2")
    end = {f"{stream}:0": {"id": "x", "seq": 5, "read": 5}, f"{stream}:1": {"id": "y", "seq": 4, "read": 4}}
    assert source.lag({"endOffset": json.dumps(end)}) == 2
    client.xadd(f"{stream}:1", {"value": "late"})
    assert source.lag({"endOffset": end}) == 3
    client.close()
