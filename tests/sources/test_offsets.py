"""Every source gives each row a unique ``offset`` that a replay of the same batch gives again.

Dead letters are keyed by ``offset`` in the database and Redis sinks: two rows with one offset
overwrite each other, a NULL one is refused. The oracles are computed here from the input.
"""

import socket
import threading
import time

import psycopg
import pytest
import redis
from pyspark.sql import Row

from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from speedlayer.sources import open_source
from speedlayer.sources.generator_kinds import BUILTIN_KINDS
from tests.sources.test_files import HEADER, line, stream_raw
from tests.sources.test_socket import wait_rows

GOOD_CSV = "a,V1,2026-11-01T10:00:01Z,40.5,52.6,13.1"
#: the same bad row four times in a file: only a per-row offset keeps all four
BAD_CSV = "b,V1,2026-11-01T10:00:02Z"


def assert_unique(rows: list[Row]) -> None:
    offsets = [r.offset for r in rows]
    assert None not in offsets
    assert len(set(offsets)) == len(offsets), sorted(o for o in offsets if offsets.count(o) > 1)[:4]


def file_name_and_number(offset: str) -> tuple[str, int]:
    path, _, number = offset.rpartition(":")
    return path.rsplit("/", 1)[-1], int(number)


def write_csv_pair(landing) -> list[tuple[str, int, str]]:
    """Two CSV files with four identical bad rows each; returns (file, line, payload) of every bad row."""
    landing.mkdir()
    bad = []
    for name in ("one.csv", "two.csv"):
        lines = [HEADER, GOOD_CSV, BAD_CSV, BAD_CSV, GOOD_CSV, BAD_CSV, BAD_CSV]
        (landing / name).write_text("\n".join(lines) + "\n")
        bad += [(name, number, text) for number, text in enumerate(lines, start=1) if text == BAD_CSV]
    return bad


def test_csv_dead_letters_into_postgres_keep_every_bad_row(spark, tmp_path, postgres_url):
    """The issue's scenario: two CSV files with four bad rows each give 8 dead letters, not 2."""
    expected = write_csv_pair(tmp_path / "landing")
    s = RunSettings(job="fleet", source=f"files://{tmp_path / 'landing'}?format=csv", trigger="available-now",
                    state_dir=str(tmp_path / "state"), sinks={"dead-letters": postgres_url})
    assert Run(spark, plan_run(s)).start_and_wait().stopped_by == "end of input"
    with psycopg.connect(postgres_url) as conn:
        got = conn.execute('SELECT "offset", payload FROM dead_letters').fetchall()
    assert len(got) == len(expected) == 8
    assert sorted((*file_name_and_number(offset), payload) for offset, payload in got) == sorted(expected)


@pytest.mark.parametrize("fmt", ["json", "text", "csv", "parquet"])
def test_file_offsets_are_unique_per_row_and_the_same_on_a_second_read(spark, tmp_path, fmt):
    import pyarrow as pa
    import pyarrow.parquet as pq

    landing = tmp_path / "landing"
    if fmt == "csv":
        bad = write_csv_pair(landing)
        expected_rows = 12
    else:
        landing.mkdir()
        same = line("a", "V1", "2026-11-01T10:00:01Z", 40.0)
        for name in ("one", "two"):  # identical rows, within a file and across files
            if fmt == "parquet":
                pq.write_table(pa.table({"event_id": ["a"] * 3, "speed_kmh": [40.0] * 3}), landing / f"{name}.parquet")
            else:
                (landing / f"{name}.{fmt}").write_text(f"{same}\n{same}\n\n{same}\n")
        expected_rows = 6
    first = stream_raw(spark, f"files://{landing}?format={fmt}", f"offsets_{fmt}_1", tmp_path).collect()
    second = stream_raw(spark, f"files://{landing}?format={fmt}", f"offsets_{fmt}_2", tmp_path).collect()
    assert len(first) == expected_rows
    assert_unique(first)
    assert sorted((r.offset, r.value) for r in first) == sorted((r.offset, r.value) for r in second)
    numbers = sorted(file_name_and_number(r.offset) for r in first)
    if fmt == "csv":  # the line number in the file (the header is line 1)
        assert numbers == sorted([(f, n) for f in ("one.csv", "two.csv") for n in (2, 5)] + [(f, n) for f, n, _ in bad])
    elif fmt == "parquet":  # the row number
        assert numbers == [(f, n) for f in ("one.parquet", "two.parquet") for n in (1, 2, 3)]
    else:  # the line number; the blank line 3 yields no row
        assert numbers == [(f"{f}.{fmt}", n) for f in ("one", "two") for n in (1, 2, 4)]


@pytest.mark.parametrize("kind", sorted(BUILTIN_KINDS))
def test_generator_offsets_are_unique_and_reproducible(spark, kind):
    source = open_source(f"generator://?kind={kind}&seed=3&start=0&duplicates=0.3&malformed=0.2")
    first, second = source.read_batch(spark, 3000).collect(), source.read_batch(spark, 3000).collect()
    assert_unique(first)
    assert sorted((r.offset, r.value) for r in first) == sorted((r.offset, r.value) for r in second)


def test_redis_offsets_are_unique_across_keys_and_batches(spark, tmp_path, redis_url):
    url, prefix = redis_url
    client = redis.Redis.from_url(url)
    for shard in range(2):
        for i in range(1, 8):  # the same payload everywhere; explicit ids equal on both keys
            client.xadd(f"{prefix}:{shard}", {"value": "same"}, id=f"5-{i}")
    uri = f"{url}?stream={prefix}&shards=2&max_records_per_trigger=4"
    rows = stream_raw(spark, uri, "offsets_redis", tmp_path).collect()
    assert len(rows) == 14
    assert_unique(rows)
    assert sorted(r.offset for r in rows) == sorted(f"{prefix}:{s}/5-{i}" for s in range(2) for i in range(1, 8))


def test_kafka_offsets_name_the_partition_and_with_several_topics_the_topic(spark):
    records = spark.createDataFrame(
        [(b"x", None, topic, part, off, None) for topic in ("a", "b") for part in (0, 1) for off in (0, 1)],
        "value binary, key binary, topic string, partition int, offset long, timestamp timestamp")
    two = open_source("kafka://localhost:9092/a,b")._raw(records).collect()
    assert_unique(two)
    one = open_source("kafka://localhost:9092/a")._raw(records.where("topic = 'a'")).collect()
    assert_unique(one)
    assert sorted(r.offset for r in one) == ["0/0", "0/1", "1/0", "1/1"]


class PushServer:
    """A loopback line server whose test decides when each burst of lines goes out."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.clients: list[socket.socket] = []
        self.accepted = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.clients.append(conn)
            self.accepted.set()

    def push(self, lines: list[str]) -> None:
        for conn in self.clients:
            conn.sendall("".join(f"{text}\n" for text in lines).encode())

    def close(self) -> None:
        self.sock.close()
        for conn in self.clients:
            conn.close()


def test_socket_offsets_are_unique_within_the_run(spark):
    """The socket source cannot replay: its offset is the line's number in the run, counted across batches."""
    server = PushServer()
    query = open_source(f"socket://127.0.0.1:{server.port}").read_stream(spark).writeStream.format("memory") \
        .queryName("offsets_socket").start()
    try:
        assert server.accepted.wait(30)
        server.push(["same"] * 5)
        wait_rows(spark, "offsets_socket", 5)
        query.processAllAvailable()
        server.push(["same"] * 5)  # a second micro-batch with the same lines in the same places
        rows = wait_rows(spark, "offsets_socket", 10)
        deadline = time.monotonic() + 30  # the last batch's progress is posted after its rows are visible
        while sum(p["numInputRows"] for p in query.recentProgress) < 10 and time.monotonic() < deadline:
            query.awaitTermination(0.1)
        batches = [p["batchId"] for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
        server.close()
    assert len(rows) == 10 and len(set(batches)) >= 2
    assert_unique(rows)
    assert sorted(int(r.offset) for r in rows) == list(range(1, 11))


def test_socket_offsets_are_the_same_when_a_batch_is_computed_twice(spark):
    """A sink that reads its batch twice (a count, then the write) must see one offset per line."""
    server = PushServer()
    seen: list[tuple[list, list]] = []

    def twice(df, batch_id):
        seen.append((sorted(r.offset for r in df.collect()), sorted(r.offset for r in df.collect())))

    query = open_source(f"socket://127.0.0.1:{server.port}").read_stream(spark).writeStream.foreachBatch(twice).start()
    try:
        assert server.accepted.wait(30)
        server.push([f"line {i}" for i in range(6)])
        for _ in range(300):  # at most a minute
            if sum(len(first) for first, _ in seen) >= 6:
                break
            query.awaitTermination(0.2)
    finally:
        query.stop()
        server.close()
    assert all(first == second for first, second in seen)


def test_socket_offsets_continue_after_a_restart_from_the_checkpoint(spark, tmp_path):
    """A restarted run numbers its new lines after the checkpoint's: dead letters of both runs keep their keys."""
    seen: list[tuple[str, int]] = []

    def collect(df, batch_id):
        seen.extend((r.value, int(r.offset)) for r in df.collect())

    for lines in (["a"] * 5, ["b"] * 3):
        server = PushServer()
        query = open_source(f"socket://127.0.0.1:{server.port}").read_stream(spark).writeStream.foreachBatch(collect) \
            .option("checkpointLocation", str(tmp_path / "cp")).start()
        try:
            assert server.accepted.wait(30)
            server.push(lines)
            wanted, deadline = len(seen) + len(lines), time.monotonic() + 60
            while len(seen) < wanted:
                assert time.monotonic() < deadline, seen
                query.awaitTermination(0.1)
        finally:
            query.stop()
            server.close()
    assert sorted(seen) == [("a", n) for n in range(1, 6)] + [("b", n) for n in range(6, 9)]
