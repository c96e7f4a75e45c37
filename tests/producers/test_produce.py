"""speedlayer produce: the generator's events, byte for byte, to Redis Streams and to a landing directory."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from speedlayer.core.errors import ConfigError
from speedlayer.producers.produce import ProduceSettings, plan_produce, produce
from speedlayer.sources import open_source

START = "2026-11-22T10:00:00Z"
GENERATOR = f"generator://?seed=7&start={START}&vehicles=300"


def generated(spark, count: int) -> list[str]:
    """The generator's payloads of events 0 … count-1, in event order."""
    raw = open_source(GENERATOR).read_batch(spark, count)
    return [r.value for r in raw.orderBy(F.col("offset").cast("long")).collect()]


def test_redis_entries_are_the_generators_events_round_robin(spark, redis_url):
    import redis

    url, stream = redis_url
    plan = plan_produce(ProduceSettings(to=f"{url}?stream={stream}&shards=3", generator=GENERATOR, rate=0,
                                        max_events=2000, chunk=700))
    summary = produce(spark, plan)
    assert (summary.events, summary.stopped_by) == (2000, "end of input")

    client = redis.Redis.from_url(url, decode_responses=True)
    shards = [[fields["value"] for _, fields in client.xrange(f"{stream}:{i}")] for i in range(3)]
    client.close()
    assert [len(s) for s in shards] == [667, 667, 666]
    in_event_order = [shards[n % 3][n // 3] for n in range(2000)]  # event n went to shard n mod 3
    expected = generated(spark, 2000)
    assert in_event_order == expected
    # the source reads the same events back; --max-events N gives exactly the first N
    source = open_source(f"{url}?stream={stream}&shards=3")
    assert sorted(r.value for r in source.read_batch(spark, 1000).collect()) == sorted(expected[:1000])


def test_landing_files_are_the_generators_events(spark, tmp_path):
    landing = tmp_path / "landing"
    plan = plan_produce(ProduceSettings(to=f"files://{landing}", generator=GENERATOR, rate=0, max_events=1500, chunk=600))
    produce(spark, plan)
    files = sorted(landing.iterdir())
    assert [f.name for f in files] == [f"events-7-{plan.start_ms}-{n:012d}.jsonl" for n in (0, 600, 1200)]
    lines = [line for f in files for line in f.read_text().splitlines()]
    assert lines == generated(spark, 1500)
    # and the files source reads them as RAW rows
    assert open_source(f"files://{landing}").read_batch(spark).count() == 1500


def test_continuing_from_an_event_number_matches_too(spark, tmp_path):
    landing = tmp_path / "landing"
    plan = plan_produce(ProduceSettings(to=f"files://{landing}", generator=GENERATOR, rate=0, max_events=300,
                                        from_event=200))
    produce(spark, plan)
    (only,) = landing.iterdir()
    assert only.read_text().splitlines() == generated(spark, 500)[200:]


def test_paced_produce_keeps_to_the_rate(spark, tmp_path):
    plan = plan_produce(ProduceSettings(to=f"files://{tmp_path / 'l'}", generator=GENERATOR, rate=1000, max_events=1500))
    summary = produce(spark, plan)
    assert summary.events == 1500
    assert summary.elapsed_s >= 1.0  # slices of one second: the second one waits for its turn
    assert len(list((tmp_path / "l").iterdir())) == 2


def test_plan_pins_start_and_names_the_matching_generator():
    plan = plan_produce(ProduceSettings(to="files:///tmp/unused", generator="generator://?seed=3&vehicles=50",
                                        rate=800, start="1795341600000"))
    assert plan.pace == 800 and plan.options.rate == 800  # event times follow the pace
    assert plan.generator_uri() == "generator://?rate=800&seed=3&start=2026-11-22T10:00:00Z&vehicles=50"
    unpinned = plan_produce(ProduceSettings(to="files:///tmp/unused"))
    assert unpinned.start_ms % 1000 == 0 and unpinned.options.start == str(unpinned.start_ms)


def test_an_unpaced_bounded_run_ends_its_event_times_before_now():
    # a job refuses events ahead of their ingest time: unpaced events must not run ahead of the clock
    import time

    plan = plan_produce(ProduceSettings(to="files:///tmp/unused", generator="generator://?rate=1000", rate=0,
                                        max_events=20_000))
    last_event_ms = plan.start_ms + 20_000 * 1000 // 1000
    assert last_event_ms <= time.time() * 1000
    paced = plan_produce(ProduceSettings(to="files:///tmp/unused", rate=500, max_events=20_000))
    assert abs(paced.start_ms - time.time() * 1000) < 2000  # paced: the events follow the clock from now


@pytest.mark.parametrize("settings,match", [
    (dict(to="bogus://x"), "cannot produce to bogus://"),
    (dict(to="kafka://broker"), "kafka://host:9092/topic"),
    (dict(to="files:///tmp/x", generator="redis://localhost/0"), "--generator takes a generator:// URI"),
    (dict(to="files:///tmp/x", generator="generator://?rate=0"), "option 'rate'"),
    (dict(to="redis://localhost/0?shards=0"), "option 'shards'"),
    (dict(to="files:///tmp/x?format=csv"), "writes JSON lines"),
])
def test_bad_settings_are_config_errors(settings, match):
    with pytest.raises(ConfigError, match=match):
        plan_produce(ProduceSettings(**settings))


def one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr + result.stdout
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_cli_bad_destination_exits_2_with_one_line(run_cli):
    from tests.servers import free_port

    result = run_cli("produce", "--to", "bogus://x", "--max-events", "10")
    assert result.returncode == 2 and "cannot produce to bogus://" in one_error_line(result)
    port = free_port()
    result = run_cli("produce", "--to", f"redis://:pw@127.0.0.1:{port}/0?stream=v")
    assert result.returncode == 2
    line = one_error_line(result)
    assert f"cannot reach Redis at 127.0.0.1:{port}" in line and ":pw@" not in line
    result = run_cli("produce", "--to", f"kafka://127.0.0.1:{port}/vehicles", "--max-events", "10")
    assert result.returncode == 2 and f"no Kafka broker answers at 127.0.0.1:{port}: start one" in one_error_line(result)
    result = run_cli("produce", "--to", "files:///tmp/x", "--rate", "-5")
    assert result.returncode == 2 and "--rate" in one_error_line(result)


@pytest.mark.slow
def test_cli_produces_to_redis_and_prints_the_pinned_start(run_cli, redis_url):
    import redis

    url, stream = redis_url
    result = run_cli("produce", "--to", f"{url}?stream={stream}&shards=2", "--max-events", "500", "--rate", "0",
                     "--seed", "7", "--start", START, "--generator", "generator://?vehicles=300")
    assert result.returncode == 0, result.stderr
    assert f"start {START} (1795341600000)" in result.stdout
    assert "generator://?rate=5000&seed=7&start=2026-11-22T10:00:00Z&vehicles=300" in result.stdout
    assert "produced 500 events" in result.stdout
    client = redis.Redis.from_url(url)
    assert client.xlen(f"{stream}:0") == client.xlen(f"{stream}:1") == 250
    client.close()


def test_ride_requests_are_produced_as_the_generator_makes_them(spark, tmp_path):
    landing = tmp_path / "rides"
    plan = plan_produce(ProduceSettings(to=f"files://{landing}", generator=GENERATOR, kind="rides", rate=0,
                                        max_events=400, chunk=250))
    assert plan.generator_uri() == f"generator://?rate=5000&seed=7&start={START}&kind=rides&vehicles=300"
    produce(spark, plan)
    lines = [line for f in sorted(landing.iterdir()) for line in f.read_text().splitlines()]
    raw = open_source(plan.generator_uri()).read_batch(spark, 400)
    assert lines == [r.value for r in raw.orderBy(F.col("offset").cast("long")).collect()]
    assert lines[0].startswith('{"request_id":"r-0000000","rider_id":"R')


def test_an_unknown_kind_is_refused():
    with pytest.raises(ConfigError, match="--kind 'bikes' is not a kind the generator makes: choose one of vehicles"):
        plan_produce(ProduceSettings(to="files:///tmp/unused", kind="bikes"))


@pytest.mark.slow
def test_cli_produces_to_a_new_kafka_topic_keyed_by_vehicle_over_its_partitions(run_cli, kafka):
    import uuid

    topic = f"fastcars_{uuid.uuid4().hex[:8]}"
    kafka.created.append(topic)  # deleted after the test
    result = run_cli("produce", "--to", f"kafka://{kafka.bootstrap}/{topic}?partitions=3", "--max-events", "600",
                     "--rate", "0", "--seed", "7", "--start", START, "--generator", "generator://?vehicles=40&late=0",
                     "--no-progress")
    assert result.returncode == 0, result.stderr
    assert f"to Kafka topic {topic} at {kafka.bootstrap} (created with 3 partitions)" in result.stdout
    records = kafka.read(topic)
    assert len(records) == 600 and {r.partition for r in records} == {0, 1, 2}
    by_vehicle = {}
    for r in records:  # every event of a vehicle in one partition, keyed by the vehicle's id
        assert json.loads(r.value)["vehicle_id"] == r.key
        by_vehicle.setdefault(r.key, set()).add(r.partition)
    assert all(len(parts) == 1 for parts in by_vehicle.values())
