"""socket:// — text lines from a TCP server; checked before start, not fault-tolerant, decoded like every source."""

import json
import socket
import threading
import time
from contextlib import closing

import pytest

from speedlayer.config import RunSettings
from speedlayer.decode import decode
from speedlayer.errors import ConfigError, SourceError
from speedlayer.runner import plan_run
from speedlayer.schemas import RAW_SCHEMA, VEHICLE_EVENT
from speedlayer.sources import open_source
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
    raw = open_source(f"socket://127.0.0.1:{server.port}").read_stream(spark)
    query = raw.writeStream.format("memory").queryName("socket_continuous").trigger(continuous="1 second").start()
    try:
        rows = wait_rows(spark, "socket_continuous", len(LINES))
    finally:
        query.stop()
    assert sorted(r.value for r in rows) == sorted(LINES)


def test_nothing_listening_is_refused_before_start():
    port = free_port()
    with pytest.raises(SourceError, match=f"nothing listens on 127.0.0.1:{port} .*start a line server first, e.g. `nc -lk {port}`") as err:
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
