"""socket:// — text lines from a TCP server; checked before start, not fault-tolerant, decoded like every source."""

import json
import socket
import threading
import time
from contextlib import closing

import pytest

from speedlayer.core.errors import ConfigError, SourceError
from speedlayer.core.schemas import RAW_SCHEMA
from speedlayer.decode.validate import decode
from speedlayer.pipelines.fleet.schemas import VEHICLE_EVENT
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.settings import RunSettings
from speedlayer.sources import open_source
from speedlayer.sources.socket_buffer import LineBuffer, split_lines
from tests.servers import free_port

GOOD = json.dumps({"event_id": "a", "vehicle_id": "V1", "event_time": "2026-11-01T10:00:01Z",
                   "speed_kmh": 42.0, "lat": 52.6, "lon": 13.1})
LINES = [GOOD, "{not json", json.dumps({"event_id": "b", "vehicle_id": "V1"})]


class LineServer:
    """A loopback TCP server that sends the same lines to every connection and keeps it open."""

    def __init__(self, lines: list[str]):
        self.lines = lines
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections: list[socket.socket] = []
        #: set once a connection has been sent every line (its sendall returned)
        self.sent = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def payload(self) -> bytes:
        """What every connection receives."""
        return "".join(f"{line}\n" for line in self.lines).encode()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections.append(conn)
            try:
                conn.sendall(self.payload())
                self.sent.set()
            except OSError:
                pass  # the reachability probe hangs up at once

    def close(self) -> None:
        self.sock.close()
        for conn in self.connections:
            conn.close()


@pytest.fixture
def server():
    srv = LineServer(LINES)
    yield srv
    srv.close()


def wait_rows(spark, table: str, count: int, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = spark.table(table).collect()
        if len(rows) >= count:
            return rows
        time.sleep(0.2)
    raise TimeoutError(f"{table} has fewer than {count} rows after {timeout}s")


def test_lines_are_decoded_and_bad_ones_become_dead_letters(spark, server):
    source = open_source(f"socket://127.0.0.1:{server.port}")
    source.check()
    raw = source.read_stream(spark)
    assert [(f.name, f.dataType) for f in raw.schema] == [(f.name, f.dataType) for f in RAW_SCHEMA]
    query = raw.writeStream.format("memory").queryName("socket_raw").start()
    try:
        rows = wait_rows(spark, "socket_raw", len(LINES))
    finally:
        query.stop()
    assert sorted(r.value for r in rows) == sorted(LINES)
    assert all(r.key is None and r.offset is not None and r.ingest_time is not None for r in rows)
    decoded = decode(spark.table("socket_raw"), VEHICLE_EVENT)
    assert [(e.event_id, e.speed_kmh) for e in decoded.events.collect()] == [("a", 42.0)]
    assert sorted(r.reason for r in decoded.dead_letters.collect()) == [
        "malformed JSON: not a JSON object", "missing field 'event_time'"]


def test_runs_in_continuous_mode(spark, server):
    """With Spark's own socket source: a Python data source cannot run in continuous mode."""
    source = open_source(f"socket://127.0.0.1:{server.port}")
    source.continuous = True  # as plan_run sets it for a continuous trigger
    raw = source.read_stream(spark)
    query = raw.writeStream.format("memory").queryName("socket_continuous").trigger(continuous="1 second").start()
    try:
        rows = wait_rows(spark, "socket_continuous", len(LINES))
    finally:
        query.stop()
    assert sorted(r.value for r in rows) == sorted(LINES)


def test_nothing_listening_is_refused_before_start():
    port = free_port()
    told = f"nothing listens on 127.0.0.1:{port} .*start a line server first, e.g. `nc -lk {port}`"
    with pytest.raises(SourceError, match=told) as err:
        open_source(f"socket://127.0.0.1:{port}").check()
    assert "\n" not in str(err.value)


def test_the_plan_says_it_is_not_fault_tolerant():
    p = plan_run(RunSettings(job="fleet", source="socket://localhost:9999", sinks={"alerts": "memory:a"}))
    assert not p.source.fault_tolerant
    assert any("socket://localhost:9999 is not fault-tolerant" in note for note in p.notes)


@pytest.mark.parametrize("uri,match", [
    ("socket://localhost", "write socket://host:port"),
    ("socket://localhost:9999/x", "write socket://host:port"),
    ("socket://localhost:9999?rate=1", "has no option 'rate'"),
    ("socket://localhost:9999?max_buffered_lines=0", "option 'max_buffered_lines': .*greater than 0"),
    ("socket://localhost:9999?max_buffered_bytes=1000",
     "max_line_bytes .* must not exceed max_buffered_bytes .*raise max_buffered_bytes"),
])
def test_bad_uris_are_one_line_config_errors(uri, match):
    with pytest.raises(ConfigError, match=match) as err:
        open_source(uri)
    assert "\n" not in str(err.value)


def test_a_server_probe_leaves_the_server_usable(server):
    source = open_source(f"socket://127.0.0.1:{server.port}")
    source.check()
    source.check()
    with closing(socket.create_connection(("127.0.0.1", server.port), timeout=3)) as conn:
        assert conn.recv(len(GOOD)).decode() == GOOD


def test_the_source_holds_at_most_max_buffered_lines_and_loses_none(spark):
    """Issue #23: a job held in its first batch while the sender writes 10x the bound. The source
    stops reading at the bound (TCP holds the rest), so no batch reads more than the bound; once
    the job catches up every line arrives exactly once, in order, numbered by the run."""
    bound = 50
    sent = [f"line {i:04d}" for i in range(10 * bound)]
    server = LineServer(sent)
    batches: dict[int, list[tuple[str, str]]] = {}

    def collect(df, batch_id):
        rows = [(r.offset, r.value) for r in df.collect()]
        if rows and not batches:  # hold the first batch until the sender has written everything
            assert server.sent.wait(30)
        batches[batch_id] = rows

    source = open_source(f"socket://127.0.0.1:{server.port}?max_buffered_lines={bound}")
    query = source.read_stream(spark).writeStream.foreachBatch(collect).start()
    try:
        deadline = time.monotonic() + 60
        while sum(map(len, batches.values())) < len(sent):
            assert time.monotonic() < deadline, f"{sum(map(len, batches.values()))} of {len(sent)} lines arrived"
            query.awaitTermination(0.2)
    finally:
        query.stop()
        server.close()
    sizes = [len(batches[b]) for b in sorted(batches)]
    assert max(sizes) <= bound, sizes
    got = [row for b in sorted(batches) for row in batches[b]]
    assert [value for _, value in got] == sent
    assert [offset for offset, _ in got] == [str(n) for n in range(1, len(sent) + 1)]


def test_the_buffer_waits_for_room_and_frees_by_line_number():
    """``put`` blocks at the bound (so the pump stops reading) until a done batch frees its lines."""
    buffer = LineBuffer(max_lines=3, max_bytes=1000, numbered_after=10)
    done = threading.Event()
    threading.Thread(target=lambda: (buffer.put([b"a", b"b", b"c", b"d", b"e"], 7), done.set()), daemon=True).start()
    deadline = time.monotonic() + 10
    while buffer.held < 3:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not done.wait(0.2) and buffer.received == 13  # lines 11 .. 13 held, d and e wait
    buffer.free_through(12)
    assert done.wait(10)
    assert buffer.take(12, 15) == [(b"c", 7), (b"d", 7), (b"e", 7)] and buffer.first == 13


def test_the_buffer_bounds_bytes_too_and_a_closed_one_takes_nothing():
    buffer = LineBuffer(max_lines=100, max_bytes=10)
    threading.Timer(0.2, buffer.close).start()
    assert not buffer.put([b"12345", b"67890", b"x"], 0)  # the third line would pass 10 bytes: waits, then closed
    assert buffer.held == 2


def test_lines_are_split_and_over_long_ones_cut_with_nothing_held_beyond():
    lines, rest = split_lines(b"", b"x" * 10 + b"\nab\r\n" + b"y" * 50, max_line_bytes=8)
    assert lines == [b"x" * 8, b"ab"] and rest == b"y" * 8
    lines, rest = split_lines(rest, b"yy\n", max_line_bytes=8)
    assert lines == [b"y" * 8] and rest == b""
