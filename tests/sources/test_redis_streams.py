"""redis:// — Redis Streams read through Spark's Python Data Source API, on a real redis-server.

Every stream query below ends by itself (trigger availableNow), so nothing waits on the clock.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from pyspark.sql import functions as F

from speedlayer.decode import decode
from speedlayer.errors import SourceError
from speedlayer.schemas import RAW_SCHEMA, VEHICLE_EVENT
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

    def collect(df, batch_id):  # noqa: ARG001
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
    from speedlayer.errors import ConfigError

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

    from speedlayer.config import RunSettings
    from speedlayer.produce import ProduceSettings, plan_produce, produce
    from speedlayer.runner import Run, plan_run
    from tests.helpers import batch_output, closed_windows

    url, stream = redis_url
    uri = f"{url}?stream={stream}&shards=2"
    # start = now: Redis stamps entries with its clock, and decode refuses events an hour ahead of it
    produce(spark, plan_produce(ProduceSettings(to=uri, generator="generator://?seed=11&rate=200&vehicles=50&late=0",
                                                rate=0, max_events=7000)))
    s = RunSettings(job="fleet", source=f"{uri}&maxRecordsPerTrigger=2500", max_events=6000,
                    state_dir=str(tmp_path / "state"), sinks={"windows": "memory:redis_fleet_windows"})
    summary = Run(spark, plan_run(s)).start_and_wait()
    assert summary.stopped_by == "--max-events 6000"
    assert summary.queries[0].input_rows == 6000
    expected = closed_windows(batch_output(spark, s, "windows"), summary.queries[0].watermark)
    assert expected.count() >= 100  # 50 vehicles, 30 s of events: at least two closed 10 s windows each
    assertDataFrameEqual(spark.table("redis_fleet_windows"), expected, rtol=1e-9)
