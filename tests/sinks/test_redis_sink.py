"""The Redis sink against a real server: latest window per vehicle as hashes, events as a stream, exactly once."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import pytest
import redis
from pyspark.sql import Window
from pyspark.sql import functions as F

from speedlayer.core.errors import ConfigError, SinkError
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from speedlayer.sinks import open_sink
from speedlayer.sinks.batches import Connector
from tests import servers
from tests.helpers import batch_output
from tests.sinks.common import ALERTS_SCHEMA, WINDOWS_SCHEMA, alerts_frame, run, settings, target, unmoded, window, windows_frame
from tests.sinks.tcp_proxy import TcpProxy


def client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


def hashes(url: str, prefix: str) -> dict[str, dict[str, str]]:
    c = client(url)
    return {key.removeprefix(prefix + ":"): c.hgetall(key) for key in c.scan_iter(f"{prefix}:*")}


def stream(url: str, key: str) -> list[tuple[str, dict[str, str]]]:
    return client(url).xrange(key)


def iso(value) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_fleet_run_keeps_each_vehicles_latest_window_and_streams_each_alert_once(spark, redis_url, tmp_path):
    url, prefix = redis_url
    s = settings(tmp_path, {"windows": f"{url}?prefix={prefix}:w", "alerts": f"{url}?prefix={prefix}:alerts"},
                 output_mode={"windows": "update"})
    run(spark, s)

    windows = batch_output(spark, unmoded(s), "windows")
    newest = F.row_number().over(Window.partitionBy("vehicle_id").orderBy(F.col("window_end").desc()))
    latest = {r["vehicle_id"]: r for r in windows.select("*", newest.alias("n")).where("n = 1").drop("n").collect()}
    got = hashes(url, f"{prefix}:w")
    assert len(got) == len(latest) == 50
    for vehicle, row in latest.items():
        h = got[vehicle]
        assert (h["window_start"], h["window_end"]) == (iso(row["window_start"]), iso(row["window_end"]))
        assert int(h["events"]) == row["events"] and int(h["over_limit_events"]) == row["over_limit_events"]
        assert float(h["avg_speed_kmh"]) == pytest.approx(row["avg_speed_kmh"], rel=1e-9)

    alerts = {r["event_id"]: r for r in batch_output(spark, s, "alerts").collect()}
    entries = stream(url, f"{prefix}:alerts")
    assert len(entries) == len(alerts) > 50
    assert {fields["event_id"] for _, fields in entries} == set(alerts)
    some = entries[0][1]
    assert float(some["speed_kmh"]) == alerts[some["event_id"]]["speed_kmh"]
    assert some["event_time"] == iso(alerts[some["event_id"]]["event_time"])


def test_a_replayed_or_half_written_batch_adds_no_stream_entry_twice(spark, redis_url):
    url, prefix = redis_url
    write = open_sink(f"{url}?prefix={prefix}:alerts").batch_function(ALERTS_SCHEMA, target("alerts"))
    write(alerts_frame(spark, 300), 0)
    write(alerts_frame(spark, 300), 0)  # replay of batch 0
    write(alerts_frame(spark, 40, first=300), 1)  # batch 1 cut short: its first 40 rows (in key order) went in
    write(alerts_frame(spark, 100, first=300), 1)  # ... and is replayed in full
    entries = stream(url, f"{prefix}:alerts")
    assert [fields["event_id"] for _, fields in entries] == [f"e-{i:06d}" for i in range(400)]


def test_another_writers_entry_between_two_batches_drops_no_batch(spark, redis_url):
    """The issue: one ``XADD key *`` by another client made every later batch look written already."""
    url, prefix = redis_url
    write = open_sink(f"{url}?stream={prefix}:dl").batch_function(ALERTS_SCHEMA, target("dead-letters"))
    write(alerts_frame(spark, 30), 0)
    other = client(url).xadd(f"{prefix}:dl", {"from": "another client"})  # an id from the clock, far above 2-0
    write(alerts_frame(spark, 20, first=30), 1)
    write(alerts_frame(spark, 20, first=30), 1)  # a replay of batch 1 still adds nothing
    entries = stream(url, f"{prefix}:dl")
    ours = [fields["event_id"] for _, fields in entries if "event_id" in fields]
    assert ours == [f"e-{i:06d}" for i in range(50)]  # the oracle: both batches' rows, once each, in order
    assert [entry_id for entry_id, fields in entries if "from" in fields] == [other]
    assert entries[30][0] == other  # the other writer's entry lies between batch 0 and batch 1


def test_dead_letters_of_two_runs_with_another_writer_between_them_are_all_in_the_stream(spark, redis_url, tmp_path):
    """End to end: run, another client's ``XADD *``, restart on a new landing file: no batch dropped."""
    url, prefix = redis_url
    landing = tmp_path / "landing"
    landing.mkdir()
    s = RunSettings(job="fleet", source=f"files://{landing}", trigger="available-now", state_dir=str(tmp_path / "st"),
                    sinks={"dead-letters": f"{url}?stream={prefix}:dl"})
    bad = {name: [f"#garbage {name} {i}" for i in range(5)] for name in ("one", "two")}
    (landing / "one.json").write_text("\n".join(bad["one"]) + "\n")
    assert Run(spark, plan_run(s)).start_and_wait().stopped_by == "end of input"
    assert len(stream(url, f"{prefix}:dl")) == 5  # the first run's batch is in
    client(url).xadd(f"{prefix}:dl", {"from": "another client"})
    (landing / "two.json").write_text("\n".join(bad["two"]) + "\n")
    assert Run(spark, plan_run(s)).start_and_wait().stopped_by == "end of input"
    payloads = [fields.get("payload") for _, fields in stream(url, f"{prefix}:dl")]
    assert payloads == bad["one"] + [None] + bad["two"]  # the oracle: every bad line once, the other entry between


class FailingPipeline:
    """A redis-py pipeline whose command number ``fail_at`` gets an error reply while the server runs the
    commands around it, as Redis does with an error inside a pipeline; ``execute`` then raises it."""

    def __init__(self, real, fail_at: int):
        self.real, self.fail_at = real, fail_at

    def __getattr__(self, name):
        return getattr(self.real, name)

    def execute(self, raise_on_error: bool = True):
        stack = self.real.command_stack
        if len(stack) > self.fail_at:
            stack[self.fail_at] = (("NO-SUCH-COMMAND",), {})
        return self.real.execute(raise_on_error)


class FailingConnection:
    def __init__(self, real, fail_at: int):
        self.real, self.fail_at = real, fail_at

    def __getattr__(self, name):
        return getattr(self.real, name)

    def pipeline(self, *args, **kwargs):
        return FailingPipeline(self.real.pipeline(*args, **kwargs), self.fail_at)


@dataclass
class FailingConnector(Connector):
    """The sink's connector, but the first pipeline of every connection fails at command ``fail_at``."""

    inner: object
    fail_at: int

    @property
    def what(self):
        return self.inner.what

    @property
    def secret(self):
        return self.inner.secret

    @property
    def retry_for_s(self):
        return self.inner.retry_for_s

    def connect(self):
        return FailingConnection(self.inner.connect(), self.fail_at)

    def write(self, conn, batch, batch_id, first_index):
        return self.inner.write(conn, batch, batch_id, first_index)

    def transient(self, error):
        return False

    def close(self, conn):
        self.inner.close(conn.real)


def test_a_batch_failed_half_way_is_replayed_with_every_row_exactly_once(spark, redis_url):
    url, prefix = redis_url
    write = open_sink(f"{url}?stream={prefix}:dl").batch_function(ALERTS_SCHEMA, target("dead-letters"))
    write(alerts_frame(spark, 700), 0)
    healthy = write.connector
    write.connector = FailingConnector(healthy, fail_at=1)
    with pytest.raises(SinkError, match="refused the write"):
        write(alerts_frame(spark, 1200, first=700), 1)
    written_before_replay = len(stream(url, f"{prefix}:dl"))
    assert 700 < written_before_replay < 1900  # the failure really came half-way through batch 1
    write.connector = healthy
    write(alerts_frame(spark, 1200, first=700), 1)  # the replay
    ours = [fields["event_id"] for _, fields in stream(url, f"{prefix}:dl")]
    assert sorted(ours) == [f"e-{i:06d}" for i in range(1900)]  # the oracle: every row of both batches, once


def test_a_vehicle_never_moves_back_to_an_older_window(spark, redis_url):
    url, prefix = redis_url
    write = open_sink(f"{url}?prefix={prefix}:w").batch_function(WINDOWS_SCHEMA, target("windows", "update"))
    write(windows_frame(spark, [window(10, "V1", 3, 50.0), window(0, "V2", 1, 20.0)]), 0)
    write(windows_frame(spark, [window(0, "V1", 9, 99.0), window(0, "V2", 2, 25.0)]), 1)  # V1: older; V2: updated
    write(windows_frame(spark, [window(20, "V1", 1, 30.0), window(10, "V1", 4, 51.0)]), 2)  # both in one batch
    got = hashes(url, f"{prefix}:w")
    assert got["V1"] == {"window_start": iso(window(20, "V1", 0, 0)[0]), "window_end": iso(window(20, "V1", 0, 0)[1]),
                         "vehicle_id": "V1", "events": "1", "avg_speed_kmh": "30"}
    assert (got["V2"]["events"], got["V2"]["avg_speed_kmh"]) == ("2", "25")


def test_a_new_run_into_a_stream_of_another_run_is_refused(spark, redis_url):
    url, prefix = redis_url
    sink = open_sink(f"{url}?stream={prefix}:s")
    sink.check("alerts", fresh_checkpoint=True)
    sink.batch_function(ALERTS_SCHEMA, target("alerts", fresh=True))(alerts_frame(spark, 3), 0)
    again = open_sink(f"{url}?stream={prefix}:s")  # its check() not called: the guard holds all the same
    with pytest.raises(SinkError, match=f"stream '{prefix}:s' already holds the output of another run"):
        again.batch_function(ALERTS_SCHEMA, target("alerts", fresh=True))
    resumed = open_sink(f"{url}?stream={prefix}:s")
    resumed.check("alerts", fresh_checkpoint=False)
    resumed.batch_function(ALERTS_SCHEMA, target("alerts"))


def test_unreachable_server_fails_check_in_one_line_without_the_password():
    port = servers.free_port()
    sink = open_sink(f"redis://app:hunter2@127.0.0.1:{port}/0?prefix=x")
    assert "hunter2" not in sink.describe() and "app:***@" in sink.describe()
    with pytest.raises(SinkError) as err:
        sink.check("windows", True)
    message = str(err.value)
    assert message.startswith(f"cannot reach Redis at 127.0.0.1:{port}/0: ")
    assert message.endswith("start the server or fix the URI")
    assert "hunter2" not in message and "\n" not in message


def test_a_batch_waits_for_a_server_that_comes_back(spark, redis_url):
    url, prefix = redis_url
    with TcpProxy((servers.REDIS.host, servers.REDIS.port)) as proxy:
        proxied = url.replace(f":{servers.REDIS.port}/", f":{proxy.port}/")
        write = open_sink(f"{proxied}?prefix={prefix}:alerts").batch_function(ALERTS_SCHEMA, target("alerts"))
        proxy.down()
        proxy.up_after(2.0)
        started = time.monotonic()
        write(alerts_frame(spark, 100), 0)
        assert time.monotonic() - started >= 2.0
    assert len(stream(url, f"{prefix}:alerts")) == 100


def test_options_and_missing_client_are_config_errors(monkeypatch):
    with pytest.raises(ConfigError, match="the path is the database number"):
        open_sink("redis://localhost:6379/fleet")
    with pytest.raises(ConfigError, match="known options: maxlen, prefix, retry_for, stream"):
        open_sink("redis://localhost:6379/0?key=x")
    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(ConfigError, match=r"pip install 'speedlayer\[redis\]'"):
        open_sink("redis://localhost:6379/0")
